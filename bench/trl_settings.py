"""The TRL settings every bench against TRL shares: CPU only, no gradient checkpointing, a log line
every step, nothing saved or reported, seed 0 (the precision is set per run)."""

TRL_CPU = {
    "fp16": False,
    "use_cpu": True,
    "gradient_checkpointing": False,
    "logging_steps": 1,
    "save_strategy": "no",
    "report_to": "none",
    "seed": 0,
    "disable_tqdm": True,
}
