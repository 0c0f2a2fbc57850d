// Command node is a multi-call binary holding the node agents of the local
// control plane's real node: kubelet and kube-proxy, built from the same
// pinned Kubernetes version as e2e/kube (a sibling module, so that adding the
// node does not change, and rebuild, the control plane's binary).
//
// It dispatches on the name it was called by (symlinks) or on its first
// argument: `node kubelet --help`.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var tools = map[string]func() *cobra.Command{
	"kubelet":    func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy": proxy.NewProxyCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args
	if name == "node" {
		if len(os.Args) < 2 {
			fmt.Fprintln(os.Stderr, "usage: node kubelet|kube-proxy [args...]")
			os.Exit(2)
		}
		name, args = os.Args[1], os.Args[1:]
	}
	newCommand, ok := tools[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "node: unknown tool %q\n", name)
		os.Exit(2)
	}
	command := newCommand()
	command.SetArgs(args[1:])
	os.Exit(cli.Run(command))
}
