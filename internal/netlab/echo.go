//go:build linux

package netlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// ServeEcho starts TCP and UDP echo servers in the namespace on each
// address (port 0 is refused: callers name the ports their Services use).
// They answer with identity until the lab closes.
func (ns *NS) ServeEcho(identity string, addrs ...netip.AddrPort) error {
	for _, ap := range addrs {
		if ap.Port() == 0 {
			return fmt.Errorf("netlab: echo %q: port 0", identity)
		}
		var (
			ln net.Listener
			pc net.PacketConn
		)
		err := ns.Do(func() error {
			var err error
			if ln, err = net.Listen("tcp", ap.String()); err != nil {
				return err
			}
			if pc, err = net.ListenPacket("udp", ap.String()); err != nil {
				ln.Close()
				return err
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("netlab: namespace %q: echo %q on %s: %w", ns.name, identity, ap, err)
		}
		s := &echoServer{identity: identity, ln: ln, pc: pc, conns: map[net.Conn]bool{}}
		s.wg.Add(2)
		go s.serveTCP()
		go s.serveUDP()
		ns.lab.onClose(s.close)
	}
	return nil
}

type echoServer struct {
	identity string
	ln       net.Listener
	pc       net.PacketConn
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool
	done  bool
}

func (s *echoServer) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			r := bufio.NewScanner(c)
			for r.Scan() {
				if _, err := c.Write([]byte(s.answer(r.Text(), c.RemoteAddr()) + "\n")); err != nil {
					return
				}
			}
		}()
	}
}

func (s *echoServer) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 2048)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = s.pc.WriteTo([]byte(s.answer(strings.TrimSpace(string(buf[:n])), from)), from)
	}
}

// peerRequest asks an echo server for its identity and the address the
// request came from (after any NAT on the way).
const peerRequest = "peer"

// answer is the server's answer to request from peer: its identity, and
// with peerRequest the peer's address after a space.
func (s *echoServer) answer(request string, peer net.Addr) string {
	if request == peerRequest {
		return s.identity + " " + peer.String()
	}
	return s.identity
}

func (s *echoServer) close() {
	s.mu.Lock()
	s.done = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.pc.Close()
	s.wg.Wait()
}

// Dial opens a connection from inside the namespace.
func (ns *NS) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Ask sends one echo request from the namespace to addr over network
// ("tcp", "udp", "tcp6", ...) and returns the identity that answered. It
// gives up when ctx is done; use a short deadline to observe drops.
func (ns *NS) Ask(ctx context.Context, network, addr string) (string, error) {
	c, err := ns.Dial(ctx, network, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return Request(ctx, c)
}

// AskPeer is Ask, returning also the source address the server saw the
// request come from: the client's own, or the one a NAT on the way gave
// it.
func (ns *NS) AskPeer(ctx context.Context, network, addr string) (string, netip.AddrPort, error) {
	c, err := ns.Dial(ctx, network, addr)
	if err != nil {
		return "", netip.AddrPort{}, err
	}
	defer c.Close()
	answer, err := request(ctx, c, peerRequest)
	if err != nil {
		return "", netip.AddrPort{}, err
	}
	id, peer, _ := strings.Cut(answer, " ")
	ap, err := netip.ParseAddrPort(peer)
	if err != nil {
		return "", netip.AddrPort{}, fmt.Errorf("netlab: echo answer %q: peer: %w", answer, err)
	}
	return id, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// Request sends one echo request on an open connection and returns the
// identity that answered.
func Request(ctx context.Context, c net.Conn) (string, error) {
	return request(ctx, c, "who")
}

// request sends req on c and returns the first line of the answer.
func request(ctx context.Context, c net.Conn, req string) (string, error) {
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	} else {
		c.SetDeadline(time.Time{})
	}
	if _, err := c.Write([]byte(req + "\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	id, _, _ := strings.Cut(string(buf[:n]), "\n")
	if id == "" {
		return "", errors.New("netlab: empty echo answer")
	}
	return id, nil
}

// Command returns a command that runs name with args inside the
// namespace, through nsenter(1).
func (ns *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + ns.Path(), "--", name}, args...)...)
}
