"""The fast CPU paths: lean forwards, the GGUF file's int4 blocks, and the check each passes where it runs."""
