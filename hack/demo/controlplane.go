package main

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/mcpbridge/operator/internal/testenv"
)

// startControlPlane starts etcd and kube-apiserver from bin/k8s with their
// data and certificates under the state directory, installs the CRDs, and
// writes a kubeconfig for kubectl and the manager.
func (d *demo) startControlPlane() error {
	scheme, err := testenv.NewScheme()
	if err != nil {
		return err
	}
	assets := filepath.Join(d.root, "bin", "k8s")
	logs, err := os.Create(filepath.Join(d.dir, "control-plane.log"))
	if err != nil {
		return err
	}
	defer logs.Close() // the processes hold their own copies
	etcdDir, certDir := filepath.Join(d.dir, "etcd"), filepath.Join(d.dir, "apiserver")
	for _, dir := range []string{etcdDir, certDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}

	d.env = &envtest.Environment{
		Scheme:                scheme,
		CRDDirectoryPaths:     []string{filepath.Join(d.root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		UseExistingCluster:    ptr.To(false), // whatever USE_EXISTING_CLUSTER says
	}
	api := d.env.ControlPlane.GetAPIServer()
	api.Path, api.CertDir, api.Out, api.Err = filepath.Join(assets, "kube-apiserver"), certDir, logs, logs
	d.env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(assets, "etcd"), DataDir: etcdDir, Out: logs, Err: logs}
	d.env.ControlPlane.KubectlPath = d.kubectlPath

	cfg, err := d.env.Start()
	// Pid files first: even a failed start may have left processes running.
	if perr := d.writeControlPlanePids(); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	if d.client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	return os.WriteFile(d.kubeconfig, d.env.KubeConfig, 0o600)
}

// writeControlPlanePids records etcd and kube-apiserver for `make demo-down`.
// envtest does not expose their pids, but they are this process's children.
func (d *demo) writeControlPlanePids() error {
	kids, err := childrenOf(os.Getpid())
	if err != nil {
		return err
	}
	for _, p := range kids {
		if name := filepath.Base(p.args[0]); name == "etcd" || name == "kube-apiserver" {
			if err := writePid(filepath.Join(d.dir, name+".pid"), p.pid); err != nil {
				return err
			}
		}
	}
	return nil
}
