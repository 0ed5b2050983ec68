package runtime

// AbandonedCompiles returns how many compilations r gave up on still run.
func AbandonedCompiles(r *Runtime) int { return r.abandoned.running() }

// ChildCompiles returns how many compile children r started.
func ChildCompiles(r *Runtime) int64 { return r.children.Load() }
