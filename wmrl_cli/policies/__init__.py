"""Policies: scripted ones (`registry`) and the OpenVLA-OFT family; their interface (Policy,
PolicyOutput) is `wmrl_cli.envs.interface`, below the simulators and envs that use it.

OpenVLA-OFT modules: `config` (tiny / full sizes), `openvla_oft` (the model), `vision`,
`sequence` (token layout, attention mask), `action_tokenizer`, `normalization`,
`text_tokenizer`, `lora`, `checkpoint` (wmrl format) and `prismatic` (published checkpoints).
Nothing is imported here, so that importing one module does not load the model code.
"""
