"""The model runtime: the embedded engine and its models, an OpenAI-compatible server as the LM, the
constrained adapter, saved prefixes, transcripts and usage. The stages that call it are program.stages."""
