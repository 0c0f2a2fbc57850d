// Command kube is a multi-call binary holding the pieces of the local control
// plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
// kubectl, all built from the upstream modules at one pinned version.
//
// One binary instead of five saves four links and several hundred MiB of disk;
// it dispatches on the name it was called by (symlinks) or on its first
// argument: `kube kube-apiserver --help`.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

var tools = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler": func() *cobra.Command {
		return scheduler.NewSchedulerCommand()
	},
	"kubectl": kubectlcmd.NewDefaultKubectlCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args
	if name == "kube" {
		if len(os.Args) < 2 {
			fmt.Fprintln(os.Stderr, "usage: kube etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubectl [args...]")
			os.Exit(2)
		}
		name, args = os.Args[1], os.Args[1:]
	}
	if name == "etcd" {
		etcdmain.Main(args)
		return
	}
	newCommand, ok := tools[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "kube: unknown tool %q\n", name)
		os.Exit(2)
	}
	command := newCommand()
	command.SetArgs(args[1:])
	if name == "kubectl" {
		// kubectl formats its own errors (exit codes as upstream kubectl).
		if err := cli.RunNoErrOutput(command); err != nil {
			cmdutil.CheckErr(err)
		}
		return
	}
	os.Exit(cli.Run(command))
}
