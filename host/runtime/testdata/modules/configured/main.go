// Command configured is a test module whose output depends on its
// configuration: {"eligible": N} makes the topology stage choose the
// first N endpoints of each port (all of them without configuration).
// {"reject": "MESSAGE"} rejects the configuration with MESSAGE, and
// {"do": "trap"}, "spin", "bomb" or "panic" misbehaves while configuring.
// A port whose Service carries the annotation wasp.test/trap traps the
// call, so that the instance is replaced.
package main

import (
	"encoding/json"
	"errors"
	"unsafe"

	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

var (
	eligible = -1 // -1: every endpoint
	hog      [][]byte
)

type config struct {
	Eligible *int   `json:"eligible"`
	Reject   string `json:"reject"`
	Do       string `json:"do"`
}

func init() {
	wasp.Configure(func(b []byte) error {
		if len(b) == 0 {
			return nil
		}
		var c config
		if err := json.Unmarshal(b, &c); err != nil {
			return err
		}
		switch c.Do {
		case "trap":
			p := (*uint32)(unsafe.Pointer(uintptr(0xFFFFFFF0)))
			return errors.New(string(rune(*p)))
		case "spin":
			for {
			}
		case "bomb":
			for {
				hog = append(hog, make([]byte, 1<<20))
			}
		case "panic":
			panic("configuration made me panic")
		}
		if c.Reject != "" {
			return errors.New(c.Reject)
		}
		if c.Eligible != nil {
			eligible = *c.Eligible
		}
		return nil
	})
	wasp.HandleTopology(func(_ wasp.Node, sp wasp.ServicePort, out *wasp.TopologyResult) error {
		if _, ok := sp.Annotation("wasp.test/trap"); ok {
			p := (*uint32)(unsafe.Pointer(uintptr(0xFFFFFFF0)))
			return errors.New(string(rune(*p)))
		}
		n := sp.Len()
		if eligible >= 0 {
			n = min(n, eligible)
		}
		for i := range n {
			out.Add(i)
		}
		return nil
	})
}

func main() {}
