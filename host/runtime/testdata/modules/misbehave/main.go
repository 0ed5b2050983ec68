// Command misbehave is a test module that misbehaves on demand: the
// annotation wasp.test/behaviour on a Service picks what happens when a
// stage evaluates one of its ports. Ports without it get a plain result.
package main

import (
	"crypto/rand"
	"errors"
	"os"
	"unsafe"

	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

const annotation = "wasp.test/behaviour"

var hog [][]byte

var sink int

// tree makes 2^n calls, recursively, with no loop.
//
//go:noinline
func tree(n int) int {
	if n == 0 {
		return 1
	}
	return tree(n-1) + tree(n-1)
}

// misbehave does what the port's annotation asks, if anything.
func misbehave(sp wasp.ServicePort) error {
	b, _ := sp.Annotation(annotation)
	switch b {
	case "spin":
		for {
		}
	case "bomb":
		for {
			hog = append(hog, make([]byte, 1<<20))
		}
	case "tree":
		// 2^62 calls and no loop: only checks around calls stop it.
		sink += tree(62)
	case "fill":
		// A bomb that writes what it takes, so that every page costs the
		// node.
		for {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			hog = append(hog, b)
		}
	case "clear":
		// memory.fill of 128 MiB at each iteration: one instruction each,
		// once charged as one.
		big := make([]byte, 128<<20)
		for {
			clear(big)
		}
	case "copy":
		// memory.copy of 64 MiB at each iteration.
		a, b := make([]byte, 64<<20), make([]byte, 64<<20)
		for {
			copy(a, b)
		}
	case "random":
		// random_get of 64 MiB at each iteration: a host call, once
		// charged as one instruction and not bounded by the host.
		big := make([]byte, 64<<20)
		for {
			_, _ = rand.Read(big)
		}
	case "trap":
		// An out-of-bounds load is a Wasm trap, not a Go panic.
		p := (*uint32)(unsafe.Pointer(uintptr(0xFFFFFFF0)))
		return errors.New(string(rune(*p)))
	case "exit":
		os.Exit(3)
	case "panic":
		panic("boom")
	case "error":
		return errors.New("declined on purpose")
	}
	return nil
}

func badIndex(sp wasp.ServicePort) bool {
	b, _ := sp.Annotation(annotation)
	return b == "badindex"
}

func init() {
	wasp.HandleTopology(func(_ wasp.Node, sp wasp.ServicePort, out *wasp.TopologyResult) error {
		if err := misbehave(sp); err != nil {
			return err
		}
		for i := range sp.Len() {
			out.Add(i)
		}
		if badIndex(sp) {
			out.Add(sp.Len() + 5)
		}
		return nil
	})
	wasp.HandleTrafficPolicy(func(_ wasp.Node, sp wasp.ServicePort, out *wasp.PolicyResult) error {
		if err := misbehave(sp); err != nil {
			return err
		}
		out.Cluster.Use()
		out.All.Use()
		for i := range sp.Len() {
			out.Cluster.Add(i)
			out.All.Add(i)
		}
		out.HasAnyEndpoints = sp.Len() > 0
		return nil
	})
	wasp.HandleEndpointSelection(func(_ wasp.Node, sp wasp.ServicePort, out *wasp.SelectionResult) error {
		if err := misbehave(sp); err != nil {
			return err
		}
		c := sp.Decision().Cluster()
		for k := range c.Len() {
			out.Set(c.At(k), 1)
		}
		if badIndex(sp) {
			out.Set(sp.Len()+5, 1)
		}
		return nil
	})
}

func main() {}
