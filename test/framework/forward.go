//go:build linux

package framework

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// Forward listens on addr (host:port) inside node's namespace and relays
// every connection to target, dialled from the test's own (the host's)
// namespace, as long as t runs. It lets a process in the lab reach a
// server the test runs on the host's loopback at the address the test
// itself uses, so a name such as 127.0.0.1:PORT means the same server on
// both sides.
func (e *Env) Forward(t testing.TB, node, addr, target string) error {
	n := e.Cluster.Node(node)
	if n == nil {
		return fmt.Errorf("forward %s: no node %q in the lab", addr, node)
	}
	var ln net.Listener
	if err := n.NS.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return fmt.Errorf("forward %s in %s: %w", addr, node, err)
	}
	var relays sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		relays.Wait()
	})
	relays.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return // closed
			}
			relays.Go(func() { relay(in, target) })
		}
	})
	return nil
}

// relay copies between in and a new connection to target, each direction
// until its end, and closes both.
func relay(in net.Conn, target string) {
	defer in.Close()
	out, err := net.Dial("tcp", target)
	if err != nil {
		return // in is closed: the client sees the server down
	}
	defer out.Close()
	var both sync.WaitGroup
	for _, p := range [][2]net.Conn{{out, in}, {in, out}} {
		both.Go(func() {
			_, _ = io.Copy(p[0], p[1])
			_ = p[0].(*net.TCPConn).CloseWrite()
		})
	}
	both.Wait()
}
