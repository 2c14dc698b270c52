"""flashcore inside other libraries: `flashcore.integrations.transformers` (Hugging Face
transformers' attention registry). Each submodule imports its library; this package alone
imports nothing."""
