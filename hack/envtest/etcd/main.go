// Command etcd is the upstream etcd server, built from go.etcd.io/etcd/server/v3
// so that envtest has an etcd without downloading a release binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
