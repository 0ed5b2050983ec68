package wasmbin

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"
)

// SectionID identifies a section of a module binary.
type SectionID byte

// Section IDs of the core specification plus the exception-handling tag
// section.
const (
	SectionCustom    SectionID = 0
	SectionType      SectionID = 1
	SectionImport    SectionID = 2
	SectionFunction  SectionID = 3
	SectionTable     SectionID = 4
	SectionMemory    SectionID = 5
	SectionGlobal    SectionID = 6
	SectionExport    SectionID = 7
	SectionStart     SectionID = 8
	SectionElement   SectionID = 9
	SectionCode      SectionID = 10
	SectionData      SectionID = 11
	SectionDataCount SectionID = 12
	SectionTag       SectionID = 13
)

var sectionNames = [...]string{
	"custom", "type", "import", "function", "table", "memory", "global",
	"export", "start", "element", "code", "data", "datacount", "tag",
}

func (id SectionID) String() string {
	if int(id) < len(sectionNames) {
		return sectionNames[id]
	}
	return fmt.Sprintf("unknown(%d)", byte(id))
}

// sectionRank is the position a non-custom section must take in a module:
// non-custom sections appear at most once each, in increasing rank. The tag
// section sits between memory and global; the data count section between
// element and code.
var sectionRank = [...]int{
	SectionType:      1,
	SectionImport:    2,
	SectionFunction:  3,
	SectionTable:     4,
	SectionMemory:    5,
	SectionTag:       6,
	SectionGlobal:    7,
	SectionExport:    8,
	SectionStart:     9,
	SectionElement:   10,
	SectionDataCount: 11,
	SectionCode:      12,
	SectionData:      13,
}

// ExternKind is the kind of an import or export.
type ExternKind byte

// Extern kinds.
const (
	KindFunc   ExternKind = 0
	KindTable  ExternKind = 1
	KindMemory ExternKind = 2
	KindGlobal ExternKind = 3
	KindTag    ExternKind = 4
)

func (k ExternKind) String() string {
	switch k {
	case KindFunc:
		return "func"
	case KindTable:
		return "table"
	case KindMemory:
		return "memory"
	case KindGlobal:
		return "global"
	case KindTag:
		return "tag"
	}
	return fmt.Sprintf("unknown(%d)", byte(k))
}

// Section is one section of a module, as found by Parse.
type Section struct {
	ID     SectionID
	Offset int    // offset of the section's ID byte in the module
	End    int    // offset just past the section
	Name   string // custom sections only
	// Payload is the section content after its size (for custom sections,
	// after the name). It aliases the slice given to Parse.
	Payload []byte
}

// Import is one entry of the import section.
type Import struct {
	Module, Name string
	Kind         ExternKind
}

// Export is one entry of the export section.
type Export struct {
	Name  string
	Kind  ExternKind
	Index uint32
}

// Module is the shallow structure of a module binary: its sections, imports
// and exports. Function bodies and other sections are not decoded.
type Module struct {
	Sections []Section
	Imports  []Import
	Exports  []Export
}

// Section returns the non-custom section with the given ID.
func (m *Module) Section(id SectionID) (Section, bool) {
	for _, s := range m.Sections {
		if s.ID == id && id != SectionCustom {
			return s, true
		}
	}
	return Section{}, false
}

// CustomSection returns the content of the first custom section named
// name.
func (m *Module) CustomSection(name string) ([]byte, bool) {
	for _, s := range m.Sections {
		if s.ID == SectionCustom && s.Name == name {
			return s.Payload, true
		}
	}
	return nil, false
}

// Export returns the export named name.
func (m *Module) Export(name string) (Export, bool) {
	for _, e := range m.Exports {
		if e.Name == name {
			return e, true
		}
	}
	return Export{}, false
}

// importCount is the number of imports of kind k.
func (m *Module) importCount(k ExternKind) int {
	n := 0
	for _, imp := range m.Imports {
		if imp.Kind == k {
			n++
		}
	}
	return n
}

var (
	magic   = []byte("\x00asm")
	version = []byte{1, 0, 0, 0}
)

const headerLen = 8

// Parse validates the header and section framing of a module binary and
// decodes its import and export sections. It checks that non-custom sections
// are known, appear at most once and in order. The returned Module aliases b.
func Parse(b []byte) (*Module, error) {
	if len(b) < headerLen {
		return nil, fmt.Errorf("wasm: header at offset 0: truncated (%d bytes)", len(b))
	}
	if !bytes.Equal(b[:4], magic) {
		// Never the bytes: the file may be anything readable on the node.
		return nil, errors.New("wasm: header at offset 0: not a WebAssembly module (bad magic)")
	}
	if !bytes.Equal(b[4:8], version) {
		return nil, fmt.Errorf("wasm: header at offset 4: unsupported version %#x (want 1)", b[4:8])
	}
	m := &Module{}
	lastRank := 0
	for off := headerLen; off < len(b); {
		s, err := readSection(b, off)
		if err != nil {
			return nil, err
		}
		if s.ID != SectionCustom {
			if int(s.ID) >= len(sectionRank) {
				return nil, s.errorf("unknown section id")
			}
			rank := sectionRank[s.ID]
			if rank <= lastRank {
				return nil, s.errorf("out of order or duplicate")
			}
			lastRank = rank
		}
		m.Sections = append(m.Sections, s)
		off = s.End
	}
	for _, s := range m.Sections {
		var err error
		switch s.ID {
		case SectionType, SectionFunction, SectionTable, SectionMemory, SectionGlobal,
			SectionElement, SectionCode, SectionData:
			// Every entry of these vectors takes at least one byte. A count
			// larger than the section is a lie that makes decoders which
			// preallocate from it (wazero's does) exhaust the process's
			// memory before they notice, so refuse it here.
			r := s.payloadReader(b)
			if _, err = r.count(1); err != nil {
				err = s.errorf("%w", err)
			}
		case SectionImport:
			m.Imports, err = parseImports(b, s)
		case SectionExport:
			m.Exports, err = parseExports(b, s)
		}
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

// readSection reads the framing of the section starting at off.
func readSection(b []byte, off int) (Section, error) {
	s := Section{ID: SectionID(b[off]), Offset: off}
	size, p, err := readULEB(b, off+1, 32)
	if err != nil {
		return s, s.errorf("size: %w", err)
	}
	if size > uint64(len(b)-p) {
		return s, s.errorf("truncated: size %d, %d bytes left", size, len(b)-p)
	}
	s.End = p + int(size)
	s.Payload = b[p:s.End:s.End]
	if s.ID == SectionCustom {
		r := reader{b: b, off: p, end: s.End}
		name, err := r.name()
		if err != nil {
			return s, s.errorf("name: %w", err)
		}
		s.Name = name
		s.Payload = b[r.off:s.End:s.End]
	}
	return s, nil
}

// SectionError reports a malformed section.
type SectionError struct {
	ID     SectionID
	Offset int   // offset of the section's ID byte in the module
	Err    error // what is wrong, with the offset where it was found
}

func (e *SectionError) Error() string {
	return fmt.Sprintf("wasm: section %d (%s) at offset %d: %v", byte(e.ID), e.ID, e.Offset, e.Err)
}

func (e *SectionError) Unwrap() error { return e.Err }

func (s Section) errorf(format string, args ...any) error {
	return &SectionError{ID: s.ID, Offset: s.Offset, Err: fmt.Errorf(format, args...)}
}

// payloadReader returns a reader over the payload of a non-custom section.
func (s Section) payloadReader(b []byte) reader {
	return reader{b: b, off: s.End - len(s.Payload), end: s.End}
}

func parseImports(b []byte, s Section) ([]Import, error) {
	r := s.payloadReader(b)
	n, err := r.count(5) // the smallest import is five bytes
	if err != nil {
		return nil, s.errorf("%w", err)
	}
	imps := make([]Import, 0, n)
	for i := range n {
		at := r.off
		imp, err := r.importEntry()
		if err != nil {
			return nil, s.errorf("import %d at offset %d: %w", i, at, err)
		}
		imps = append(imps, imp)
	}
	if err := r.done(); err != nil {
		return nil, s.errorf("%w", err)
	}
	return imps, nil
}

func parseExports(b []byte, s Section) ([]Export, error) {
	r := s.payloadReader(b)
	n, err := r.count(3) // the smallest export is three bytes
	if err != nil {
		return nil, s.errorf("%w", err)
	}
	exps := make([]Export, 0, n)
	for i := range n {
		at := r.off
		name, err := r.name()
		if err != nil {
			return nil, s.errorf("export %d at offset %d: name: %w", i, at, err)
		}
		kind, err := r.byte()
		if err != nil {
			return nil, s.errorf("export %d at offset %d: kind: %w", i, at, err)
		}
		if kind > byte(KindTag) {
			return nil, s.errorf("export %d at offset %d: unknown kind %#x", i, at, kind)
		}
		idx, err := r.u32()
		if err != nil {
			return nil, s.errorf("export %d at offset %d: index: %w", i, at, err)
		}
		exps = append(exps, Export{Name: name, Kind: ExternKind(kind), Index: idx})
	}
	if err := r.done(); err != nil {
		return nil, s.errorf("%w", err)
	}
	return exps, nil
}

// reader is a bounds-checked cursor over b[off:end]. Offsets are absolute
// positions in the module, so errors can name them.
type reader struct {
	b        []byte
	off, end int
}

// atErr wraps err with the offset it occurred at.
func atErr(off int, err error) error {
	return fmt.Errorf("%w at offset %d", err, off)
}

func (r *reader) byte() (byte, error) {
	if r.off >= r.end {
		return 0, atErr(r.off, errTruncated)
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) u32() (uint32, error) {
	v, next, err := readULEB(r.b[:r.end], r.off, 32)
	if err != nil {
		return 0, atErr(r.off, err)
	}
	r.off = next
	return uint32(v), nil
}

// peekU32 reads a u32 without moving past it.
func (r *reader) peekU32() (uint32, bool) {
	v, _, err := readULEB(r.b[:r.end], r.off, 32)
	return uint32(v), err == nil
}

func (r *reader) u64() (uint64, error) {
	v, next, err := readULEB(r.b[:r.end], r.off, 64)
	if err != nil {
		return 0, atErr(r.off, err)
	}
	r.off = next
	return v, nil
}

func (r *reader) sleb(bits uint) (int64, error) {
	v, next, err := readSLEB(r.b[:r.end], r.off, bits)
	if err != nil {
		return 0, atErr(r.off, err)
	}
	r.off = next
	return v, nil
}

func (r *reader) skip(n int) error {
	if n < 0 || n > r.end-r.off {
		return atErr(r.off, errTruncated)
	}
	r.off += n
	return nil
}

// count reads a vector length and checks that the rest of the reader can
// hold that many elements of at least minSize bytes, so callers may
// preallocate safely.
func (r *reader) count(minSize int) (int, error) {
	at := r.off
	n, err := r.u32()
	if err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	if uint64(n)*uint64(minSize) > uint64(r.end-r.off) {
		return 0, fmt.Errorf("count %d at offset %d: exceeds remaining %d bytes", n, at, r.end-r.off)
	}
	return int(n), nil
}

func (r *reader) name() (string, error) {
	at := r.off
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	if uint64(n) > uint64(r.end-r.off) {
		return "", atErr(at, errTruncated)
	}
	s := r.b[r.off : r.off+int(n)]
	if !utf8.Valid(s) {
		return "", fmt.Errorf("name at offset %d: invalid UTF-8", at)
	}
	r.off += int(n)
	return string(s), nil
}

// done reports an error if the reader has not consumed everything.
func (r *reader) done() error {
	if r.off != r.end {
		return fmt.Errorf("%d trailing bytes at offset %d", r.end-r.off, r.off)
	}
	return nil
}

func (r *reader) importEntry() (Import, error) {
	mod, err := r.name()
	if err != nil {
		return Import{}, fmt.Errorf("module name: %w", err)
	}
	name, err := r.name()
	if err != nil {
		return Import{}, fmt.Errorf("name: %w", err)
	}
	kind, err := r.byte()
	if err != nil {
		return Import{}, fmt.Errorf("kind: %w", err)
	}
	imp := Import{Module: mod, Name: name, Kind: ExternKind(kind)}
	switch imp.Kind {
	case KindFunc:
		_, err = r.u32()
	case KindTable:
		if err = r.refType(); err == nil {
			err = r.limits()
		}
	case KindMemory:
		err = r.limits()
	case KindGlobal:
		err = r.globalType()
	case KindTag:
		var attr byte
		if attr, err = r.byte(); err == nil {
			if attr != 0 {
				err = fmt.Errorf("tag attribute %#x at offset %d: unknown", attr, r.off-1)
			} else {
				_, err = r.u32()
			}
		}
	default:
		return Import{}, fmt.Errorf("unknown kind %#x at offset %d", kind, r.off-1)
	}
	if err != nil {
		return Import{}, fmt.Errorf("%s %q.%q: %w", imp.Kind, mod, name, err)
	}
	return imp, nil
}

// limits skips table or memory limits: flags (bit 0 max present, bit 1
// shared, bit 2 64-bit), min and optional max.
func (r *reader) limits() error {
	at := r.off
	flags, err := r.byte()
	if err != nil {
		return err
	}
	if flags > 7 {
		return fmt.Errorf("limits flags %#x at offset %d: unknown", flags, at)
	}
	read := r.u32
	if flags&4 != 0 {
		read = func() (uint32, error) { _, err := r.u64(); return 0, err }
	}
	if _, err := read(); err != nil {
		return err
	}
	if flags&1 != 0 {
		if _, err := read(); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) globalType() error {
	if err := r.valType(); err != nil {
		return err
	}
	at := r.off
	mut, err := r.byte()
	if err != nil {
		return err
	}
	if mut > 1 {
		return fmt.Errorf("global mutability %#x at offset %d: unknown", mut, at)
	}
	return nil
}

// errBadType is wrapped by errors about undecodable value types.
var errBadType = errors.New("unknown value type")

// valType skips a value type: a number, vector or abstract reference type
// (one byte), or a typed reference (ref null? heaptype).
func (r *reader) valType() error {
	at := r.off
	c, err := r.byte()
	if err != nil {
		return err
	}
	switch c {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, // i32 i64 f32 f64 v128
		0x70, 0x6f, 0x6e, 0x6d, 0x6c, 0x6b, 0x6a, 0x69, // func extern any eq i31 struct array exn
		0x71, 0x72, 0x73, 0x74: // none noextern nofunc noexn
		return nil
	case 0x63, 0x64: // (ref null ht), (ref ht)
		_, err := r.sleb(33)
		return err
	}
	return fmt.Errorf("%w %#x at offset %d", errBadType, c, at)
}

// expect reads one byte and checks that it is want.
func (r *reader) expect(want byte) error {
	at := r.off
	c, err := r.byte()
	if err != nil {
		return err
	}
	if c != want {
		return fmt.Errorf("byte %#x at offset %d: want %#x", c, at, want)
	}
	return nil
}

// funcTypes reads the type section r to its end and calls fn for every
// function type, in type index order, with r at the type's parameter
// vector (just past its 0x60 form byte); grouped says whether the type is
// a member of a recursion group. fn must read the type, as funcType does.
// It returns the number of types.
func (r *reader) funcTypes(fn func(idx uint64, grouped bool) error) (uint64, error) {
	n, err := r.count(1)
	if err != nil {
		return 0, err
	}
	var idx uint64 // type index of the next entry
	for i := range n {
		at := r.off
		form, err := r.byte()
		if err != nil {
			return 0, fmt.Errorf("type %d: %w", i, err)
		}
		switch form {
		case 0x60:
			err = fn(idx, false)
			idx++
		case 0x4e: // recursion group of function types
			var members int
			if members, err = r.count(3); err != nil {
				break
			}
			for range members {
				if err = r.expect(0x60); err != nil {
					break
				}
				if err = fn(idx, true); err != nil {
					break
				}
				idx++
			}
		default:
			return 0, fmt.Errorf("type %d at offset %d: unsupported form %#x", i, at, form)
		}
		if err != nil {
			return 0, fmt.Errorf("type %d at offset %d: %w", i, at, err)
		}
	}
	return idx, r.done()
}

// funcType skips the parameter and result types of a function type whose
// 0x60 form byte was read.
func (r *reader) funcType() error {
	for range 2 {
		n, err := r.count(1)
		if err != nil {
			return err
		}
		for range n {
			if err := r.valType(); err != nil {
				return err
			}
		}
	}
	return nil
}

// refType skips the type of a table, global or element segment: one byte,
// or a typed reference (ref null? heaptype). Which bytes are valid types
// there is left to the validator, which is laxer than valType.
func (r *reader) refType() error {
	c, err := r.byte()
	if err != nil {
		return err
	}
	if c == 0x63 || c == 0x64 {
		_, err = r.sleb(33)
	}
	return err
}
