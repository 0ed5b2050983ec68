package runtime

import (
	"context"
	"fmt"
	"slices"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// wasp's wasi_snapshot_preview1 is wazero's, with a bound on every
// function whose work grows with an argument the guest chooses.
//
// The instrumentation charges a host call one unit of the budget, the
// cost of about one instruction, and checks the deadline only between
// runs of the guest's own code. wazero's WASI ignores the call's context,
// so one call that does work in proportion to its arguments (a 128 MiB
// random_get takes 0.15 s) ran to its end, and a loop-free body of
// thousands of such calls held its call, and the sync loop waiting for
// it, for minutes past its deadline. Each function below that could do
// so fails, with the errno POSIX gives where it has a precedent, past a
// bound that keeps its work to microseconds, or, when the work must stay
// (random_get), does it in parts with the deadline checked before each.
// Every replaced function checks the deadline first (checkDeadline), so
// a guest past its deadline is stopped at its next such call.
//
// The audit of every function, under wasp's configuration (engine and
// newInstance): no preopened directories, no arguments, no environment,
// wazero's fake clocks, deterministic random bytes and a sleep and yield
// that return at once; stdin at end of file; stdout and stderr into the
// first 4 KiB kept of them (head). The only open descriptors are stdio's
// three, and no call can open another.
//
//	function                   guest controls                bound
//	args_*, environ_*          result pointers               none: nothing to list
//	clock_res_get, _time_get   clock id, precision           none: constant
//	fd_advise, fd_allocate,    fd, offsets, sizes, flags     none: one fd lookup; stdio has no
//	 fd_close, fd_datasync,                                   size to allocate or truncate, and
//	 fd_fdstat_*, fd_filestat_*,                              no offset to seek
//	 fd_seek, fd_sync, fd_tell
//	fd_renumber                to: the fd table grows to it  none: stdio cannot be renumbered
//	                                                          (ENOTSUP), nothing else is open
//	fd_prestat_get, _dir_name  fd, path_len                  none: EBADF, no preopens
//	fd_readdir                 buf_len: entries read         none: EBADF, no directory is open
//	fd_read, fd_pread,         iovs_len: a read or write     ≤ maxIovecs (1024, IOV_MAX), else
//	 fd_write, fd_pwrite        per iovec, empty ones too     EINVAL
//	sock_recv, sock_send       ri_data_len, si_data_len      ≤ maxIovecs, else EINVAL (EBADF
//	                                                          first anyway: no socket is open)
//	sock_accept, _shutdown     fd, flags                     none: EBADF
//	poll_oneoff                nsubscriptions: an event,     ≤ maxSubscriptions (1024), else
//	                            an allocation and 32 bytes    EINVAL; a clock sleeps not at all,
//	                            of output cleared each        stdin is always ready
//	path_* (all ten)           path lengths: a path is       ≤ maxPathLen (4095 bytes), else
//	                            copied and cleaned before     ENAMETOOLONG
//	                            its fd is looked up
//	random_get                 buf_len, up to all of         none, as the work must be done:
//	                            memory: about 1 ns a byte     randomChunk (64 KiB) at a time, the
//	                                                          deadline checked before each
//	proc_exit, proc_raise,     exit code, signal             none: constant
//	 sched_yield

// Bounds on what one WASI call may ask of the host.
const (
	// maxIovecs caps the iovecs of one read or write: IOV_MAX on Linux,
	// past which readv and writev fail with EINVAL.
	maxIovecs = 1024
	// maxSubscriptions caps poll_oneoff's subscriptions: Linux's poll
	// fails with EINVAL past RLIMIT_NOFILE descriptors, 1024 by default.
	maxSubscriptions = 1024
	// maxPathLen caps a path's length in bytes: Linux's PATH_MAX, 4096,
	// counts the terminating NUL, which a WASI path (a pointer and a
	// length) does not have. Longer ones fail with ENAMETOOLONG, as on
	// Linux.
	maxPathLen = 4096 - 1
	// randomChunk is how much of a random_get's buffer is filled between
	// two checks of the deadline: about 70 µs of work.
	randomChunk = 64 << 10
)

// WASI preview 1 errno values (the errno enum of the specification).
const (
	errnoFault       = 21
	errnoInval       = 28
	errnoNametoolong = 37
)

// wasiBound caps arguments of a WASI function: a call with any of them
// past max fails with errno and does nothing else.
type wasiBound struct {
	params []string // parameter names, as wazero's function definition has them
	max    uint32
	errno  uint32
}

// wasiBounds are the bounds of the audit above, by function.
var wasiBounds = map[string]wasiBound{
	"fd_read":   {[]string{"iovs_len"}, maxIovecs, errnoInval},
	"fd_pread":  {[]string{"iovs_len"}, maxIovecs, errnoInval},
	"fd_write":  {[]string{"iovs_len"}, maxIovecs, errnoInval},
	"fd_pwrite": {[]string{"iovs_len"}, maxIovecs, errnoInval},
	"sock_recv": {[]string{"ri_data_len"}, maxIovecs, errnoInval},
	"sock_send": {[]string{"si_data_len"}, maxIovecs, errnoInval},

	"poll_oneoff": {[]string{"nsubscriptions"}, maxSubscriptions, errnoInval},

	"path_create_directory":   {[]string{"path_len"}, maxPathLen, errnoNametoolong},
	"path_filestat_get":       {[]string{"path_len"}, maxPathLen, errnoNametoolong},
	"path_filestat_set_times": {[]string{"path_len"}, maxPathLen, errnoNametoolong},
	"path_link":               {[]string{"old_path_len", "new_path_len"}, maxPathLen, errnoNametoolong},
	"path_open":               {[]string{"path_len"}, maxPathLen, errnoNametoolong},
	"path_readlink":           {[]string{"path_len"}, maxPathLen, errnoNametoolong},
	"path_remove_directory":   {[]string{"path_len"}, maxPathLen, errnoNametoolong},
	"path_rename":             {[]string{"old_path_len", "new_path_len"}, maxPathLen, errnoNametoolong},
	"path_symlink":            {[]string{"old_path_len", "new_path_len"}, maxPathLen, errnoNametoolong},
	"path_unlink_file":        {[]string{"path_len"}, maxPathLen, errnoNametoolong},
}

// instantiateWASI instantiates wasp's wasi_snapshot_preview1 in e:
// wazero's, with the functions of the audit above replaced by bounded
// ones that call wazero's within their bounds.
func instantiateWASI(ctx context.Context, e wazero.Runtime) error {
	stock, err := stockWASI(ctx, e)
	if err != nil {
		return err
	}
	b := e.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	// A later export of a name replaces the earlier one
	// (hostModuleBuilder.ExportHostFunc in wazero's builder.go).
	replace := func(def api.FunctionDefinition, fn api.GoModuleFunction) {
		b.NewFunctionBuilder().
			WithGoModuleFunction(fn, def.ParamTypes(), def.ResultTypes()).
			WithName(def.Name()).
			WithParameterNames(def.ParamNames()...).
			WithResultNames(def.ResultNames()...).
			Export(def.ExportNames()[0])
	}
	for name, bound := range wasiBounds {
		def, fn, err := stockFunc(stock, name)
		if err != nil {
			return err
		}
		args := make([]int, len(bound.params))
		for i, p := range bound.params {
			if args[i] = slices.Index(def.ParamNames(), p); args[i] < 0 {
				return fmt.Errorf("%s.%s has no parameter %q", wasi_snapshot_preview1.ModuleName, name, p)
			}
		}
		replace(def, boundedWASIFunc(fn, args, bound.max, bound.errno))
	}
	def, fn, err := stockFunc(stock, "random_get")
	if err != nil {
		return err
	}
	replace(def, randomGet(fn))
	_, err = b.Instantiate(ctx)
	return err
}

// stockWASI returns the definitions of wazero's wasi_snapshot_preview1
// functions, by name. Its Go functions are not exported, but a compiled
// host module hands them out.
func stockWASI(ctx context.Context, e wazero.Runtime) (map[string]api.FunctionDefinition, error) {
	b := e.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	c, err := b.Compile(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close(ctx) }()
	return c.ExportedFunctions(), nil
}

// stockFunc returns the definition and Go function of wazero's function
// name.
func stockFunc(stock map[string]api.FunctionDefinition, name string) (api.FunctionDefinition, api.GoModuleFunction, error) {
	def, ok := stock[name]
	if !ok {
		return nil, nil, fmt.Errorf("%s has no function %s", wasi_snapshot_preview1.ModuleName, name)
	}
	fn, ok := def.GoFunction().(api.GoModuleFunction)
	if !ok {
		return nil, nil, fmt.Errorf("%s.%s is a %T, not a GoModuleFunction", wasi_snapshot_preview1.ModuleName, name, def.GoFunction())
	}
	return def, fn, nil
}

// boundedWASIFunc is stock with the parameters at args capped at max: a
// call with any past it fails with errno.
func boundedWASIFunc(stock api.GoModuleFunction, args []int, max, errno uint32) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		checkDeadline(ctx, mod)
		for _, i := range args {
			if uint32(stack[i]) > max {
				stack[0] = uint64(errno)
				return
			}
		}
		stock.Call(ctx, mod, stack)
	}
}

// randomGet is stock, wazero's random_get, called on one randomChunk of
// the buffer at a time, with the deadline checked before each. The
// random source is a stream (math/rand's Read keeps its position within
// a value between reads), so the bytes are the same as stock's in one
// call.
func randomGet(stock api.GoModuleFunction) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		checkDeadline(ctx, mod)
		buf, n := uint32(stack[0]), uint32(stack[1])
		// As stock does, a buffer partly outside memory fails with
		// nothing written.
		if _, ok := mod.Memory().Read(buf, n); !ok {
			stack[0] = errnoFault
			return
		}
		for {
			part := min(n, randomChunk)
			stack[0], stack[1] = uint64(buf), uint64(part)
			stock.Call(ctx, mod, stack)
			buf, n = buf+part, n-part
			if stack[0] != 0 || n == 0 {
				return
			}
			checkDeadline(ctx, mod)
		}
	}
}
