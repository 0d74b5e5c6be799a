"""vLLM as child processes: the command lines (`argv`), the log (`logs`), the lifecycle
(`server`)."""
