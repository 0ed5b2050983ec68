package worker

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// supported: workers run here.
const supported = true

// prepare makes the calling worker the first process the kernel kills
// when its cgroup or the node runs out of memory, so that a module that
// takes too much gets its worker killed rather than the proxy (raising
// one's own score needs no privilege); keeps its pipes from the processes
// it starts; and ignores the signals that stop wasp (a terminal's Ctrl-C,
// a supervisor's SIGTERM to the whole group), so that wasp's calls are
// answered while it stops: a worker ends when wasp closes its pipe or
// dies.
func prepare() {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	syscall.CloseOnExec(requestFD)
	syscall.CloseOnExec(replyFD)
}

// setDataLimit sets the calling process's RLIMIT_DATA, unless limit is 0.
func setDataLimit(limit uint64) error {
	if limit == 0 {
		return nil
	}
	if err := unix.Setrlimit(unix.RLIMIT_DATA, &unix.Rlimit{Cur: limit, Max: limit}); err != nil {
		return fmt.Errorf("RLIMIT_DATA of %d MiB: %w", limit>>20, err)
	}
	return nil
}

// pipeSize is the size a worker's pipes are given: Linux's default
// pipe-max-size, what an unprivileged process may ask for. A batch of
// 1024 service ports of 10 endpoints is about 720 KiB.
const pipeSize = 1 << 20

// growPipe makes the pipe of f hold pipeSize bytes, if it may.
func growPipe(f *os.File) {
	_, _ = unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, pipeSize)
}

// writeVec writes the buffers of vec to f, in as few system calls as
// the pipe's room allows. It consumes vec.
func writeVec(f *os.File, vec [][]byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		for len(vec) > 0 {
			n, err := unix.Writev(int(fd), vec)
			if err == unix.EAGAIN {
				return false // wait until the pipe has room
			}
			if err != nil {
				werr = err
				return true
			}
			for n > 0 && len(vec) > 0 {
				k := min(n, len(vec[0]))
				vec[0], n = vec[0][k:], n-k
				if len(vec[0]) == 0 {
					vec = vec[1:]
				}
			}
			for len(vec) > 0 && len(vec[0]) == 0 {
				vec = vec[1:]
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	return werr
}

// selfExecutable is the running executable, even if its file was
// replaced or removed since it started.
func selfExecutable() (string, error) { return "/proc/self/exe", nil }

// childAttr makes a worker get SIGKILL when the thread that started it
// ends, which is when its process does (spawn's thread never ends
// before).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// residentMemory returns the resident memory of process pid (VmRSS) and
// its peak (VmHWM), from /proc/PID/status.
func residentMemory(pid int) (rss, peak uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, false // gone
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, value, _ := bytes.Cut(sc.Bytes(), []byte(":"))
		var dst *uint64
		switch string(key) {
		case "VmRSS":
			dst = &rss
		case "VmHWM":
			dst = &peak
		default:
			continue
		}
		// "    1234 kB"
		fields := bytes.Fields(value)
		if len(fields) != 2 || string(fields[1]) != "kB" {
			return 0, 0, false
		}
		kb, err := strconv.ParseUint(string(fields[0]), 10, 64)
		if err != nil {
			return 0, 0, false
		}
		*dst = kb << 10
	}
	return rss, peak, rss > 0
}

// prepareSlots keeps the worker's n slots from the processes it starts.
func prepareSlots(n int) {
	for i := range n {
		syscall.CloseOnExec(slotFD + i)
	}
}
