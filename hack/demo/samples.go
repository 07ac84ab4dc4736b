package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// namespace is where the samples go; they name none themselves.
const namespace = "default"

// sampleSet is what the demo learnt from config/samples.
type sampleSet struct {
	names        []string // the McpServers, in kustomize order
	stdioFixture string   // the stdio McpServer running bin/mcp-fixture: the one the demo kills
}

// applySamples renders config/samples with kustomize, points every
// Streamable HTTP sample at the demo's fixture, and applies the result.
func (d *demo) applySamples(ctx context.Context, httpURL string) (*sampleSet, error) {
	rendered, err := d.kubectl(ctx, nil, "kustomize", filepath.Join(d.root, "config", "samples"))
	if err != nil {
		return nil, err
	}
	set := &sampleSet{}
	var docs []string
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rendered), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decoding config/samples: %w", err)
		}
		if obj == nil {
			continue
		}
		if u := (unstructured.Unstructured{Object: obj}); u.GetKind() == "McpServer" {
			set.names = append(set.names, u.GetName())
			transport, _, _ := unstructured.NestedString(obj, "spec", "transport")
			command, _, _ := unstructured.NestedString(obj, "spec", "stdio", "command")
			switch {
			case transport == "streamable-http":
				if err := unstructured.SetNestedField(obj, httpURL, "spec", "streamableHttp", "url"); err != nil {
					return nil, err
				}
			case transport == "stdio" && filepath.Base(command) == "mcp-fixture" && set.stdioFixture == "":
				set.stdioFixture = u.GetName()
			}
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		docs = append(docs, string(b))
	}
	if set.stdioFixture == "" {
		return nil, errors.New("config/samples has no stdio McpServer running bin/mcp-fixture for the demo to kill")
	}

	d.say("Applying config/samples to namespace %s (Streamable HTTP samples pointed at the fixture)", namespace)
	out, err := d.kubectl(ctx, strings.NewReader(strings.Join(docs, "---\n")), "apply", "-n", namespace, "-f", "-")
	if err != nil {
		return nil, err
	}
	fmt.Fprint(d.out, indent(out))
	return set, nil
}

// waitReady waits until every sample is Ready, printing each as it gets
// there.
func (d *demo) waitReady(ctx context.Context, set *sampleSet) error {
	d.say("Waiting for %s to be Ready", strings.Join(set.names, ", "))
	begin := time.Now()
	pending := map[string]bool{}
	for _, n := range set.names {
		pending[n] = true
	}
	err := d.poll(ctx, func() (bool, error) {
		for _, n := range set.names {
			s, err := d.get(ctx, n)
			if err != nil {
				return false, err
			}
			if pending[n] && s.Status.Phase == v1alpha1.PhaseReady {
				delete(pending, n)
				fmt.Fprintf(d.out, "    %-12s Ready after %-6s %3d tools, connection generation %d\n",
					n, time.Since(begin).Round(100*time.Millisecond), s.Status.ToolCount, s.Status.ConnectionGeneration)
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil && ctx.Err() == nil {
		_ = d.printTable(ctx)
		return fmt.Errorf("not every sample became Ready: %w; see %s", err, d.rel(d.manager.logPath))
	}
	return err
}

// printTable shows what a user sees with kubectl.
func (d *demo) printTable(ctx context.Context) error {
	out, err := d.kubectl(ctx, nil, "get", "mcpservers", "-n", namespace, "-o", "wide")
	if err != nil {
		return err
	}
	fmt.Fprint(d.out, indent(out))
	return nil
}

// poll calls cond every 100 ms until it is true, fails, or readyTimeout
// passes; a manager that exits meanwhile ends the wait at once.
func (d *demo) poll(ctx context.Context, cond func() (bool, error)) error {
	deadline := time.After(d.readyTimeout)
	for {
		if ok, err := cond(); ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.manager.Done():
			return fmt.Errorf("the manager exited: %v", d.manager.Err())
		case <-deadline:
			return fmt.Errorf("timed out after %s", d.readyTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (d *demo) get(ctx context.Context, name string) (*v1alpha1.McpServer, error) {
	s := &v1alpha1.McpServer{}
	return s, d.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s)
}

// kubectl runs bin/k8s/kubectl against the demo's apiserver only.
func (d *demo) kubectl(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, d.kubectlPath, append([]string{"--kubeconfig=" + d.kubeconfig}, args...)...)
	cmd.Dir = d.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+d.kubeconfig)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}
