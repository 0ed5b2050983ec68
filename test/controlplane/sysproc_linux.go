package controlplane

import "syscall"

// sysProcAttr makes the kernel kill etcd and kube-apiserver when the test
// binary dies without running its cleanups (go test -timeout panics, say).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
