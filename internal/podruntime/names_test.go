package podruntime_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mcpbridge/operator/internal/podruntime"
)

func TestNames(t *testing.T) {
	long := strings.Repeat("a", 253)
	for _, tc := range []struct {
		name                      string
		server                    string
		wantDeployment, wantLabel string // "" = shortened (checked by the properties below)
	}{
		{name: "a short name is kept", server: "github", wantDeployment: "github-mcp", wantLabel: "github"},
		{name: "a name of 48 characters still fits", server: strings.Repeat("b", 48),
			wantDeployment: strings.Repeat("b", 48) + "-mcp", wantLabel: strings.Repeat("b", 48)},
		{name: "a name of 49 characters is shortened for the Deployment only", server: strings.Repeat("c", 49),
			wantLabel: strings.Repeat("c", 49)},
		{name: "a name of 63 characters is still a label value", server: strings.Repeat("d", 63), wantLabel: strings.Repeat("d", 63)},
		{name: "a name of 64 characters is shortened everywhere", server: strings.Repeat("e", 64)},
		{name: "a name of 253 characters", server: long},
		{name: "a dotted name is no DNS label: hashed", server: "my.server", wantLabel: "my.server"},
		{name: "a long name whose cut ends in a dash", server: strings.Repeat("f", 42) + "-" + strings.Repeat("g", 100)},
		{name: "a long dotted name", server: strings.Repeat("h.", 100) + "i"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dep, label, secret := podruntime.DeploymentName(tc.server), podruntime.LabelValue(tc.server), podruntime.TokenSecretName(tc.server)
			if tc.wantDeployment != "" && dep != tc.wantDeployment {
				t.Errorf("DeploymentName = %q, want %q", dep, tc.wantDeployment)
			}
			if tc.wantDeployment == "" && dep == tc.server+"-mcp" {
				t.Errorf("DeploymentName = %q, want it shortened", dep)
			}
			if tc.wantLabel != "" && label != tc.wantLabel {
				t.Errorf("LabelValue = %q, want %q", label, tc.wantLabel)
			}
			if tc.wantLabel == "" && label == tc.server {
				t.Errorf("LabelValue = %q, want it shortened", label)
			}
			// The ReplicaSet adds "-" and up to 10 characters: it must stay a DNS label.
			if errs := validation.IsDNS1123Label(dep + "-0123456789"); len(errs) > 0 {
				t.Errorf("DeploymentName %q leaves no room for the ReplicaSet: %v", dep, errs)
			}
			if !strings.HasSuffix(dep, "-mcp") {
				t.Errorf("DeploymentName %q does not end in -mcp", dep)
			}
			if secret != dep+"-token" {
				t.Errorf("TokenSecretName = %q, want %q", secret, dep+"-token")
			}
			if errs := validation.IsDNS1123Subdomain(secret); len(errs) > 0 {
				t.Errorf("TokenSecretName %q: %v", secret, errs)
			}
			if errs := validation.IsValidLabelValue(label); len(errs) > 0 {
				t.Errorf("LabelValue %q: %v", label, errs)
			}
			for _, n := range []string{dep, label} {
				if n != podruntime.DeploymentName(tc.server) && n != podruntime.LabelValue(tc.server) {
					t.Errorf("not deterministic: %q", n)
				}
			}
		})
	}
}

func TestShortenedNamesStayApart(t *testing.T) {
	prefix := strings.Repeat("p", 100)
	pairs := [][2]string{
		{prefix + "-one", prefix + "-two"},                 // same first characters, both shortened
		{"my.server", "my-server"},                         // the dot becomes a dash in the Deployment name
		{strings.Repeat("q", 64), strings.Repeat("q", 65)}, // one character apart past the cut
	}
	for _, p := range pairs {
		if a, b := podruntime.DeploymentName(p[0]), podruntime.DeploymentName(p[1]); a == b {
			t.Errorf("DeploymentName(%q) = DeploymentName(%q) = %q", p[0], p[1], a)
		}
		if a, b := podruntime.LabelValue(p[0]), podruntime.LabelValue(p[1]); a == b && p[0] != p[1] && len(p[0]) > 63 {
			t.Errorf("LabelValue(%q) = LabelValue(%q) = %q", p[0], p[1], a)
		}
	}
}

func TestLabels(t *testing.T) {
	got := podruntime.Labels("github")
	want := map[string]string{"app.kubernetes.io/managed-by": "mcpbridge", "mcpbridge.dev/server": "github"}
	if len(got) != len(want) {
		t.Fatalf("Labels = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Labels[%q] = %q, want %q", k, got[k], v)
		}
	}
}
