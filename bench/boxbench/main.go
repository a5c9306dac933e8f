// Command boxbench is the benchmark harness behind bench/run.
package main

import (
	"fmt"
	"log"
	"os"
)

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("boxbench ")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: boxbench run|report|sftp-wrapper|ssh-gate|delay-proxy|k8s-exec ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runMain(os.Args[2:])
	case "report":
		err = reportMain(os.Args[2:])
	case "sftp-wrapper":
		err = sftpWrapperMain(os.Args[2:])
	case "ssh-gate":
		err = sshGateMain(os.Args[2:])
	case "delay-proxy":
		err = delayProxyMain(os.Args[2:])
	case "k8s-exec":
		err = k8sExecMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "boxbench:", err)
		os.Exit(1)
	}
}
