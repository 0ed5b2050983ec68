// Package nsthread runs code inside a Linux network namespace without
// letting the namespace leak into the rest of the process.
//
// A network namespace belongs to an OS thread, not to a process or a
// goroutine. Do and Fresh therefore run f on a new goroutine locked to its
// OS thread for its whole life and never unlocked: when the goroutine
// ends, the Go runtime ends the thread with it, so no other goroutine is
// ever scheduled on a thread that entered a namespace, even when f panics
// halfway. What f creates keeps the namespace it was created in: a socket
// stays in it whichever thread uses it later, and a process f starts
// (os/exec forks from the calling thread) runs inside it.
package nsthread
