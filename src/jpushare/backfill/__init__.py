"""The LLM backfill keeper: inference servers on the GPUs research jobs leave free."""
