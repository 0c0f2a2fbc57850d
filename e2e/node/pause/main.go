// Command pause is the sandbox ("pause") process of every pod on the real
// node: it holds the pod's namespaces open, reaps the zombies it inherits as
// the pod's init, and exits on SIGINT or SIGTERM. Built static (CGO off) and
// packaged alone in an OCI image, because no registry is reachable here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
