"""The sizes and prompts every llm test uses (prefill 32, cache 128, 3 prompts x 16 tokens)."""

PREFILL, CACHE, NEW_TOKENS = 32, 128, 16
PROMPTS = ("the quick brown fox", "hello world, this is a tiny", "one two three four five six")
