package runtime

import (
	"fmt"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/runtime/internal/wasmbin"
)

// Annotate returns wasm with meta stored in its metadata custom section,
// replacing any earlier metadata. It validates meta, and checks that the
// result passes Inspect: the marker and every declared stage's export must
// be there.
func Annotate(wasm []byte, meta *metadata.Metadata) ([]byte, error) {
	if err := meta.Validate(); err != nil {
		return nil, err
	}
	payload, err := meta.Marshal()
	if err != nil {
		return nil, err
	}
	if _, err := wasmbin.Parse(wasm); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	out := wasmbin.AppendCustomSection(wasm, abi.MetadataSection, payload)
	if _, err := Inspect(out); err != nil {
		return nil, err
	}
	return out, nil
}
