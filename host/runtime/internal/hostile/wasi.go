package hostile

import "fmt"

// WASIGuest is a wasp ABI v1 module for the topology stage that imports
// WASI preview 1 functions, for tests of what the host does when a guest
// calls them with arguments of its choosing.
//
// Function i of the module is its i-th import, so the stage's code calls
// import i with call i (see Call). For each import the module also exports
// a function of the same type named "call_" and the import's name, which
// passes its arguments on and returns the import's errno: with it a test
// makes any WASI call from Go and reads the memory it wrote.
type WASIGuest struct {
	// Pages is the memory's minimum, in 64 KiB pages (at least 1).
	Pages int
	// Imports names the functions the module imports from
	// wasi_snapshot_preview1, in order: random_get, poll_oneoff, the
	// reads and writes of fd_ and sock_ and the path_ functions.
	Imports []string
	// Stage is wasp_topology's code, (i32 ptr, i32 len) -> i64, without
	// locals and ending with end. nil returns no output.
	Stage []byte
}

// wasiParams is the parameter types of the WASI preview 1 functions a
// WASIGuest may import; each returns an i32 errno.
var wasiParams = map[string][]byte{
	"random_get":              {i32, i32},
	"fd_read":                 {i32, i32, i32, i32},
	"fd_write":                {i32, i32, i32, i32},
	"fd_pread":                {i32, i32, i32, i64, i32},
	"fd_pwrite":               {i32, i32, i32, i64, i32},
	"sock_recv":               {i32, i32, i32, i32, i32, i32},
	"sock_send":               {i32, i32, i32, i32, i32},
	"poll_oneoff":             {i32, i32, i32, i32},
	"path_create_directory":   {i32, i32, i32},
	"path_filestat_get":       {i32, i32, i32, i32, i32},
	"path_filestat_set_times": {i32, i32, i32, i32, i64, i64, i32},
	"path_link":               {i32, i32, i32, i32, i32, i32, i32},
	"path_open":               {i32, i32, i32, i32, i32, i64, i64, i32, i32},
	"path_readlink":           {i32, i32, i32, i32, i32, i32},
	"path_remove_directory":   {i32, i32, i32},
	"path_rename":             {i32, i32, i32, i32, i32, i32},
	"path_symlink":            {i32, i32, i32, i32, i32},
	"path_unlink_file":        {i32, i32, i32},
}

// Call is code that calls import fn with args, one per parameter, and
// leaves its errno (an i32) on the stack: append 0x1a to drop it.
func (g WASIGuest) Call(fn int, args ...int64) []byte {
	params := g.params(fn)
	if len(args) != len(params) {
		panic(fmt.Sprintf("hostile: %s takes %d arguments, not %d", g.Imports[fn], len(params), len(args)))
	}
	var code []byte
	for i, a := range args {
		if params[i] == i64 {
			code = append(code, 0x42) // i64.const
		} else {
			code = append(code, 0x41) // i32.const
			a = int64(int32(uint32(a)))
		}
		code = appendSigned(code, a)
	}
	code = append(code, 0x10) // call
	return append(code, u(fn)...)
}

func (g WASIGuest) params(fn int) []byte {
	params, ok := wasiParams[g.Imports[fn]]
	if !ok {
		panic(fmt.Sprintf("hostile: no signature for WASI function %q", g.Imports[fn]))
	}
	return params
}

// Module encodes the guest.
func (g WASIGuest) Module() []byte {
	n := len(g.Imports)
	types := [][]byte{
		{0x60, 1, i32, 1, i32},      // 0: (i32) -> i32
		{0x60, 2, i32, i32, 1, i64}, // 1: (i32, i32) -> i64
		{0x60, 0, 0},                // 2: () -> ()
	}
	var imports [][]byte
	funcs := [][]byte{u(2), u(0), u(1)}
	stage := g.Stage
	if stage == nil {
		stage = []byte{0x42, 0x00, 0x0b}
	}
	code := [][]byte{
		Body(nil, 0x0b),                   // marker
		Body(nil, 0x41, 0x80, 0x08, 0x0b), // wasp_buffer: i32.const 1024
		Body(nil, stage...),               // wasp_topology
	}
	exports := [][]byte{
		cat(str("wasp_abi_v1"), []byte{0x00}, u(n)),
		cat(str("wasp_buffer"), []byte{0x00}, u(n+1)),
		cat(str("wasp_topology"), []byte{0x00}, u(n+2)),
		cat(str("memory"), []byte{0x02}, u(0)),
	}
	for i, name := range g.Imports {
		params := g.params(i)
		types = append(types, cat([]byte{0x60}, u(len(params)), params, []byte{1, i32}))
		imports = append(imports, cat(str("wasi_snapshot_preview1"), str(name), []byte{0x00}, u(3+i)))
		funcs = append(funcs, u(3+i))
		var pass []byte
		for p := range params {
			pass = append(pass, 0x20) // local.get p
			pass = append(pass, u(p)...)
		}
		pass = append(pass, 0x10) // call i
		pass = append(pass, u(i)...)
		code = append(code, Body(nil, append(pass, 0x0b)...))
		exports = append(exports, cat(str("call_"+name), []byte{0x00}, u(n+3+i)))
	}
	meta := `{"name":"hostile","version":"1.0.0","abi":1,"stages":["topology"]}`
	return cat(
		[]byte("\x00asm\x01\x00\x00\x00"),
		section(1, vec(types...)),
		section(2, vec(imports...)),
		section(3, vec(funcs...)),
		section(5, vec(cat([]byte{0x00}, u(max(g.Pages, 1))))),
		section(7, vec(exports...)),
		section(10, vec(code...)),
		section(0, str("wasp.metadata"), []byte(meta)),
	)
}
