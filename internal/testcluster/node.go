package testcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

// CgroupRoot is the cgroup, in every hierarchy, under which kubelet puts
// every Pod; hack/e2e-sandbox.sh creates it and removes it after the run.
const CgroupRoot = "/mcpbridge-e2e"

// SandboxImage is the pause image containerd v2.4.2 pins for Pod sandboxes;
// bin/images/pause.tar carries this name.
const SandboxImage = "registry.k8s.io/pause:3.10.2"

// containerdConfig: CRI with runc (seccomp, restrict_oom_score_adj because
// these machines lack CAP_SYS_RESOURCE, cgroupfs as on a cgroup v1 host),
// CNI from bin/node/cni, everything else under the state folder.
const containerdConfig = `version = 3
root = "{{.State}}/containerd/root"
state = "{{.State}}/containerd/state"

[grpc]
  address = "{{.Socket}}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{{.SandboxImage}}"

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{{.Bin}}/runc"
        Root = "{{.State}}/containerd/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{{.Bin}}/cni"]
    conf_dir = "{{.State}}/cni/net.d"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`

// cniConfig: a bridge that is the Pods' gateway, addresses from PodCIDR,
// no masquerading (nothing leaves the namespace).
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "dataDir": "{{.State}}/cni/ipam",
              "ranges": [[{"subnet": "{{.PodCIDR}}"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
`

// kubeletConfig: the note's configuration that worked on these machines
// (cgroup v1, no swap check, low eviction thresholds, fast crash-loop
// restarts), no iptables chains, no host DNS, state under the state folder.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {{.NodeIP}}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: {{.CA}}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{{.Socket}}
podLogsDir: {{.State}}/kubelet/pod-logs
volumePluginDir: {{.State}}/kubelet/volume-plugins
resolvConf: {{.State}}/kubelet/resolv.conf
makeIPTablesUtilChains: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
crashLoopBackOff: {maxContainerRestartPeriod: 1s}
`

// nodeValues fill the templates above.
type nodeValues struct {
	State, Socket, Bin, SandboxImage, PodCIDR, NodeIP, CA, CgroupRoot string
}

func (c *Cluster) nodeValues() nodeValues {
	return nodeValues{
		State: c.state, Socket: c.ContainerdSocket, Bin: filepath.Join(c.root, "bin", "node"),
		SandboxImage: SandboxImage, PodCIDR: PodCIDR, NodeIP: c.NodeIP.String(),
		CA: c.pki.ca.certPath, CgroupRoot: CgroupRoot,
	}
}

func (c *Cluster) startContainerd() error {
	cfg := c.path("containerd", "config.toml")
	if err := render(cfg, containerdConfig, c.nodeValues()); err != nil {
		return err
	}
	if err := render(c.path("cni", "net.d", "10-e2e.conflist"), cniConfig, c.nodeValues()); err != nil {
		return err
	}
	// containerd finds its shim on PATH.
	path := "PATH=" + c.bin("node", "") + ":" + os.Getenv("PATH")
	return c.start("containerd", c.bin("node", "containerd"), []string{"--config=" + cfg}, path)
}

func (c *Cluster) startKubelet() error {
	cfg := c.path("kubelet", "config.yaml")
	if err := render(cfg, kubeletConfig, c.nodeValues()); err != nil {
		return err
	}
	// No nameserver: Pods get no DNS (there is none to reach).
	if err := os.WriteFile(c.path("kubelet", "resolv.conf"), nil, 0o644); err != nil {
		return err
	}
	kubeconfig, err := c.writeKubeconfig("kubelet", c.pki.node)
	if err != nil {
		return err
	}
	return c.start("kubelet", c.bin("node", "kubelet"), []string{
		"--config=" + cfg, "--kubeconfig=" + kubeconfig,
		"--root-dir=" + c.path("kubelet", "root"), "--cert-dir=" + c.path("kubelet", "pki"),
		"--hostname-override=" + NodeName, "--node-ip=" + c.NodeIP.String(),
		"--v=2",
	})
}

// render writes the template text, filled with v, to path.
func render(path, text string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	if err := template.Must(template.New(filepath.Base(path)).Parse(text)).Execute(&b, v); err != nil {
		return fmt.Errorf("rendering %s: %w", path, err)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
