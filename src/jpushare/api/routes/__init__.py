"""The API's routers, one module per area; `create_app` includes them all.

Handlers only parse, check permissions and call the store (or `api.metric_figures`, `api.why`):
no SQL here.
"""
