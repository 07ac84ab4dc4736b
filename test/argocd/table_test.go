package argocd_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/operator/test/argocd"
)

// healthTests is testdata/health_test.yaml, in the shape of Argo CD's own
// resource_customizations/*/health_test.yaml, plus the kstatus verdict.
type healthTests struct {
	Tests []struct {
		HealthStatus argocd.HealthStatus `json:"healthStatus"`
		Kstatus      status.Status       `json:"kstatus"`
		// KstatusDiffers says why Argo CD and kstatus may read this
		// object differently; empty, they must agree.
		KstatusDiffers string `json:"kstatusDiffers"`
		InputPath      string `json:"inputPath"`
	} `json:"tests"`
}

// TestHealthOfCapturedObjects runs the shipped health check over every
// object of testdata/health_test.yaml (McpServers captured from the
// controller's envtest suite) and checks Argo CD's verdict, kstatus's, and
// that the two agree: Healthy and Current, Progressing and InProgress,
// Degraded and Failed.
func TestHealthOfCapturedObjects(t *testing.T) {
	script := readScript(t)
	b, err := os.ReadFile(filepath.Join("testdata", "health_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var table healthTests
	if err := yaml.UnmarshalStrict(b, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Tests) == 0 {
		t.Fatal("testdata/health_test.yaml has no tests")
	}
	for _, tc := range table.Tests {
		t.Run(tc.InputPath, func(t *testing.T) {
			obj := readObject(t, tc.InputPath)
			got, err := argocd.Health(context.Background(), script, obj)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.HealthStatus {
				t.Errorf("Argo CD health %+v, want %+v", got, tc.HealthStatus)
			}
			ks, err := argocd.Kstatus(obj)
			if err != nil {
				t.Fatal(err)
			}
			if ks != tc.Kstatus {
				t.Errorf("kstatus %s, want %s", ks, tc.Kstatus)
			}
			if agree := argocd.Agrees[got.Status] == ks; agree != (tc.KstatusDiffers == "") {
				t.Errorf("Argo CD says %s and kstatus %s; kstatusDiffers is %q", got.Status, ks, tc.KstatusDiffers)
			}
		})
	}
}

// readObject decodes a captured object as the apiserver's JSON: integers
// stay int64, as kstatus requires and Argo CD hands them to Lua.
func readObject(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u.Object
}
