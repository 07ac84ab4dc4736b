package testcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startTimeout bounds each wait of Start; a healthy start takes seconds.
const startTimeout = 2 * time.Minute

// poll calls ready every 100 ms until it returns nil, a component exits,
// or startTimeout passes; the error names what it waited for.
func (c *Cluster) poll(ctx context.Context, what string, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var last error
	for {
		for _, p := range c.procs {
			if err := p.exited(); err != nil {
				return fmt.Errorf("waiting for %s: %w\n%s", what, err, tail(p.log.Name(), 20))
			}
		}
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) waitEtcd(ctx context.Context) error {
	return c.poll(ctx, "etcd", func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, "http://127.0.0.1:"+strconv.Itoa(etcdPort)+"/health")
	})
}

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.pki.ca.cert)
	cert, err := tls.X509KeyPair(c.pki.admin.cert, c.pki.admin.key)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	return c.poll(ctx, "kube-apiserver", func(ctx context.Context) error {
		return httpOK(ctx, hc, apiServerURL("127.0.0.1")+"/readyz")
	})
}

func (c *Cluster) waitContainerd(ctx context.Context) error {
	return c.poll(ctx, "containerd", func(ctx context.Context) error {
		return exec.CommandContext(ctx, c.bin("node", "ctr"), "--address", c.ContainerdSocket, "version").Run()
	})
}

// importPause loads the sandbox image before kubelet starts: there is no
// registry to pull it from.
func (c *Cluster) importPause(ctx context.Context) error {
	return c.ImportImage(ctx, c.Image("pause"))
}

func (c *Cluster) waitNodeReady(ctx context.Context) error {
	return c.poll(ctx, "node "+NodeName+" Ready", func(ctx context.Context) error {
		node, err := c.Clientset.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s is not Ready", NodeName)
	})
}

// waitServiceAccounts waits for kube-controller-manager: the default
// ServiceAccount and kube-root-ca.crt of the default namespace.
func (c *Cluster) waitServiceAccounts(ctx context.Context) error {
	return c.poll(ctx, "the default ServiceAccount and kube-root-ca.crt", func(ctx context.Context) error {
		if _, err := c.Clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := c.Clientset.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
}

func httpOK(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// tail returns the last n lines of a log file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
