package runtime

// AbandonedCompiles returns how many compilations r gave up on still run.
func AbandonedCompiles(r *Runtime) int { return r.abandoned.running() }
