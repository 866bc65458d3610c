"""Policies: the interface (`base`), scripted ones (`registry`) and the OpenVLA-OFT family.

OpenVLA-OFT modules: `config` (tiny / full sizes), `openvla_oft` (the model), `vision`,
`sequence` (token layout, attention mask), `action_tokenizer`, `normalization`,
`text_tokenizer`, `lora`, `checkpoint` (wmrl format) and `prismatic` (published checkpoints).
Nothing is imported here so that `wmrl_cli.policies.base` stays light.
"""
