// The pod sandbox's "pause" process for the test cluster: it holds the pod's
// namespaces, reaps orphans (it is PID 1 when the pod shares its PID
// namespace) and exits on SIGINT/SIGTERM. Built static and imported into
// containerd as the sandbox image, since no registry is reachable here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
