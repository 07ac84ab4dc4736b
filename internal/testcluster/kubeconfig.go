package testcluster

import (
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes state/kubeconfigs/NAME for a client certificate
// and returns its path.
func (c *Cluster) writeKubeconfig(name string, kp keyPair) (string, error) {
	path := c.path("kubeconfigs", name)
	if err := os.MkdirAll(c.path("kubeconfigs"), 0o700); err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: apiServerURL("127.0.0.1"), CertificateAuthorityData: c.pki.ca.cert}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.cert, ClientKeyData: kp.key}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: name}
	cfg.CurrentContext = "e2e"
	return path, clientcmd.WriteToFile(*cfg, path)
}
