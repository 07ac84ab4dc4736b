package testcluster

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
)

// The cluster's fixed addresses. The network namespace is the run's own,
// so fixed ports cannot collide with anything.
const (
	// APIServerPort is the apiserver's secure port, on every address of the
	// namespace (loopback and the node's address).
	APIServerPort = 6443
	etcdPort      = 2379
	etcdPeerPort  = 2380
	// ServiceCIDR holds ClusterIPs, which do not route (no kube-proxy).
	ServiceCIDR = "10.96.0.0/24"
	// PodCIDR is the CNI bridge's range, inside the namespace only.
	PodCIDR  = "10.244.0.0/24"
	NodeName = "e2e-node"
)

func (c *Cluster) startEtcd() error {
	url := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	return c.start("etcd", c.bin("k8s", "etcd"), []string{
		"--data-dir=" + c.path("etcd"),
		"--listen-client-urls=" + url, "--advertise-client-urls=" + url,
		"--listen-peer-urls=http://127.0.0.1:" + strconv.Itoa(etcdPeerPort),
		"--unsafe-no-fsync", "--log-level=warn",
	})
}

func (c *Cluster) startAPIServer() error {
	p := c.pki
	return c.start("kube-apiserver", c.bin("k8s", "kube-apiserver"), []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(etcdPort),
		"--bind-address=0.0.0.0", "--secure-port=" + strconv.Itoa(APIServerPort),
		"--advertise-address=" + c.NodeIP.String(),
		// The apiserver refuses to reconcile the kubernetes Service's
		// endpoints onto this address otherwise; nothing routes them anyway.
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--tls-cert-file=" + p.apiserver.certPath, "--tls-private-key-file=" + p.apiserver.keyPath,
		"--client-ca-file=" + p.ca.certPath,
		"--kubelet-client-certificate=" + p.kubeletClient.certPath, "--kubelet-client-key=" + p.kubeletClient.keyPath,
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPubPath, "--service-account-signing-key-file=" + p.saKeyPath,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--profiling=false",
	})
}

func (c *Cluster) startControllerManager() error {
	p := c.pki
	kubeconfig, err := c.writeKubeconfig("controller-manager", p.controllerManager)
	if err != nil {
		return err
	}
	return c.start("kube-controller-manager", c.bin("node", "kube-controller-manager"), []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=10257",
		"--leader-elect=false",
		// Publishes kube-root-ca.crt in every namespace and signs tokens.
		"--root-ca-file=" + p.ca.certPath,
		"--service-account-private-key-file=" + p.saKeyPath,
		"--use-service-account-credentials=true",
		"--service-cluster-ip-range=" + ServiceCIDR,
		// Not under /usr/libexec, which the controller creates otherwise.
		"--flex-volume-plugin-dir=" + c.path("flexvolume"),
		"--profiling=false",
	})
}

func (c *Cluster) startScheduler() error {
	kubeconfig, err := c.writeKubeconfig("scheduler", c.pki.scheduler)
	if err != nil {
		return err
	}
	return c.start("kube-scheduler", c.bin("node", "kube-scheduler"), []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=10259",
		"--leader-elect=false",
		"--profiling=false",
	})
}

// serverIPs are the addresses the apiserver's certificate is valid for.
func serverIPs(nodeIP net.IP) []net.IP {
	return []net.IP{net.IPv4(127, 0, 0, 1), nodeIP, net.IPv4(10, 96, 0, 1)}
}

func (c *Cluster) start(name, bin string, args []string, env ...string) error {
	p, err := startProcess(c.LogDir, name, bin, args, env...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return nil
}

// bin is a binary of bin/k8s or bin/node.
func (c *Cluster) bin(dir, name string) string {
	return filepath.Join(c.root, "bin", dir, name)
}

// path is a file or directory of the node's state.
func (c *Cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.state}, elem...)...)
}

func apiServerURL(host string) string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(host, strconv.Itoa(APIServerPort)))
}
