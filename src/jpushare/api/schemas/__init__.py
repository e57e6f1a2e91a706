"""The API's request and response bodies (pydantic), in modules by what they hold.

`XCreate` is what a client sends, `XPublic` what it gets back, `XsPublic` a list of them;
records from the store become `XPublic` through the `*_public` functions beside them.
"""
