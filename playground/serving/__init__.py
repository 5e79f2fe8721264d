"""What a shared server allows: model keys, hub sizes, memory, time and row budgets."""
