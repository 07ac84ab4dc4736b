package policy_test

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// The runtime configurations the tests choose from.
var (
	// noLocal is the secure default: every stdio server runs in a Pod.
	noLocal = policy.RuntimeConfig{}
	// localTrusted allows Local in the namespace "trusted" only.
	localTrusted = policy.RuntimeConfig{LocalNamespaces: []string{"trusted"}}
	// customImages replaces both default images.
	customImages = policy.RuntimeConfig{NodeImage: "registry.local/node:22", PythonImage: "registry.local/uv:3.13"}
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestSelectRuntime(t *testing.T) {
	pod := func(image string) policy.Selection {
		return policy.Selection{Runtime: v1alpha1.RuntimePod, Image: image}
	}
	local := policy.Selection{Runtime: v1alpha1.RuntimeLocal}

	for _, tc := range []struct {
		name       string
		cfg        policy.RuntimeConfig
		namespace  string
		image      string
		command    string
		want       policy.Selection
		wantNoDflt bool // no default image: an invalid spec
	}{
		{name: "an image means Pod", cfg: noLocal, namespace: "agents", image: "ghcr.io/org/srv:1", command: "srv",
			want: pod("ghcr.io/org/srv:1")},
		{name: "an image means Pod also where Local is allowed for all", cfg: allLocal, namespace: "agents",
			image: "ghcr.io/org/srv:1", command: "npx", want: pod("ghcr.io/org/srv:1")},
		{name: "an image means Pod also in an allowed namespace", cfg: localTrusted, namespace: "trusted",
			image: "srv:1", command: "srv", want: pod("srv:1")},
		{name: "no image, * allows every namespace", cfg: allLocal, namespace: "agents", command: "anything", want: local},
		{name: "no image, the namespace is listed", cfg: localTrusted, namespace: "trusted", command: "anything", want: local},
		{name: "no image, * among other names", cfg: policy.RuntimeConfig{LocalNamespaces: []string{"a", "*"}},
			namespace: "agents", command: "anything", want: local},
		{name: "no image, another namespace is listed: npx gets the node image", cfg: localTrusted, namespace: "agents",
			command: "npx", want: pod(policy.DefaultNodeImage)},
		{name: "no image, a listed name is not a prefix match", cfg: localTrusted, namespace: "trusted-not",
			command: "npx", want: pod(policy.DefaultNodeImage)},
		{name: "npx gets the node image", cfg: noLocal, namespace: "agents", command: "npx", want: pod(policy.DefaultNodeImage)},
		{name: "node gets the node image", cfg: noLocal, namespace: "agents", command: "node", want: pod(policy.DefaultNodeImage)},
		{name: "uvx gets the python image", cfg: noLocal, namespace: "agents", command: "uvx", want: pod(policy.DefaultPythonImage)},
		{name: "uv gets the python image", cfg: noLocal, namespace: "agents", command: "uv", want: pod(policy.DefaultPythonImage)},
		{name: "python gets the python image", cfg: noLocal, namespace: "agents", command: "python", want: pod(policy.DefaultPythonImage)},
		{name: "python3 gets the python image", cfg: noLocal, namespace: "agents", command: "python3", want: pod(policy.DefaultPythonImage)},
		{name: "/usr/bin/python3 counts by its base name", cfg: noLocal, namespace: "agents", command: "/usr/bin/python3",
			want: pod(policy.DefaultPythonImage)},
		{name: "/usr/local/bin/node counts by its base name", cfg: noLocal, namespace: "agents", command: "/usr/local/bin/node",
			want: pod(policy.DefaultNodeImage)},
		{name: "a relative path counts by its base name", cfg: noLocal, namespace: "agents", command: "./bin/npx",
			want: pod(policy.DefaultNodeImage)},
		{name: "the configured node image", cfg: customImages, namespace: "agents", command: "npx", want: pod("registry.local/node:22")},
		{name: "the configured python image", cfg: customImages, namespace: "agents", command: "uvx", want: pod("registry.local/uv:3.13")},
		{name: "an unknown command has no default image", cfg: noLocal, namespace: "agents", command: "mcp-server", wantNoDflt: true},
		{name: "python3.13 is not python3", cfg: noLocal, namespace: "agents", command: "python3.13", wantNoDflt: true},
		{name: "NPX is not npx", cfg: noLocal, namespace: "agents", command: "NPX", wantNoDflt: true},
		{name: "a path ending in a directory named npx is not npx", cfg: noLocal, namespace: "agents", command: "/opt/npx/run",
			wantNoDflt: true},
		{name: "an empty namespace entry allows nothing", cfg: policy.RuntimeConfig{LocalNamespaces: []string{""}},
			namespace: "agents", command: "bash", wantNoDflt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ferr := policy.SelectRuntime(tc.cfg, tc.namespace, tc.image, tc.command)
			if tc.wantNoDflt {
				if ferr == nil {
					t.Fatalf("SelectRuntime = %+v, want an error on spec.stdio.image", got)
				}
				if ferr.Field != "spec.stdio.image" || ferr.Type != field.ErrorTypeRequired {
					t.Errorf("error on %s of type %s, want spec.stdio.image Required: %v", ferr.Field, ferr.Type, ferr)
				}
				for _, want := range []string{"required on this cluster", "own Pods", "no default image", `"` + tc.namespace + `"`} {
					if !strings.Contains(ferr.Error(), want) {
						t.Errorf("message %q does not say %q", ferr.Error(), want)
					}
				}
				return
			}
			if ferr != nil {
				t.Fatalf("SelectRuntime: %v", ferr)
			}
			if got != tc.want {
				t.Errorf("SelectRuntime = %+v, want %+v", got, tc.want)
			}
		})
	}

	t.Run("the default images are the documented ones", func(t *testing.T) {
		if policy.DefaultNodeImage != "node:22-bookworm-slim" {
			t.Errorf("DefaultNodeImage = %q", policy.DefaultNodeImage)
		}
		if policy.DefaultPythonImage != "ghcr.io/astral-sh/uv:python3.13-bookworm-slim" {
			t.Errorf("DefaultPythonImage = %q", policy.DefaultPythonImage)
		}
	})
}

func withImage(i string) specMod { return func(s *v1alpha1.McpServerSpec) { s.Stdio.Image = i } }
func withPull(p corev1.PullPolicy) specMod {
	return func(s *v1alpha1.McpServerSpec) { s.Stdio.ImagePullPolicy = p }
}
func withSA(n string) specMod {
	return func(s *v1alpha1.McpServerSpec) { s.Stdio.ServiceAccountName = n }
}
func withResources(r corev1.ResourceRequirements) specMod {
	return func(s *v1alpha1.McpServerSpec) { s.Stdio.Resources = &r }
}

func quantities(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func TestResolveChoosesTheRuntime(t *testing.T) {
	defaults := policy.CombineResources(nil)
	for _, tc := range []struct {
		name string
		cfg  policy.RuntimeConfig
		spec *v1alpha1.McpServerSpec
		want policy.Stdio // Command, Args and Env are not compared
	}{
		{name: "Local where allowed", cfg: allLocal, spec: stdioSpec(),
			want: policy.Stdio{Runtime: v1alpha1.RuntimeLocal}},
		{name: "Pod with the spec's image, the default pull policy and resources", cfg: allLocal,
			spec: stdioSpec(withImage("ghcr.io/org/srv:1.2")),
			want: policy.Stdio{Runtime: v1alpha1.RuntimePod, Pod: &policy.Pod{
				Image: "ghcr.io/org/srv:1.2", ImagePullPolicy: corev1.PullIfNotPresent, Resources: defaults}}},
		{name: "Pod with the default image for npx where Local is not allowed", cfg: noLocal,
			spec: stdioSpec(withCommand("npx")),
			want: policy.Stdio{Runtime: v1alpha1.RuntimePod, Pod: &policy.Pod{
				Image: policy.DefaultNodeImage, ImagePullPolicy: corev1.PullIfNotPresent, Resources: defaults}}},
		{name: "Pod-only fields on a Pod server are kept", cfg: localTrusted,
			spec: stdioSpec(withCommand("uvx"), withPull(corev1.PullAlways), withSA("mcp-runner"),
				withResources(corev1.ResourceRequirements{Limits: quantities("memory", "1Gi")})),
			want: policy.Stdio{Runtime: v1alpha1.RuntimePod, Pod: &policy.Pod{
				Image: policy.DefaultPythonImage, ImagePullPolicy: corev1.PullAlways, ServiceAccountName: "mcp-runner",
				Resources: corev1.ResourceRequirements{
					Requests: quantities("cpu", "50m", "memory", "64Mi"),
					Limits:   quantities("cpu", "500m", "memory", "1Gi"),
				}}}},
		{name: "Pod env keeps the references, never the values", cfg: noLocal,
			spec: stdioSpec(withImage("srv:1"), withEnv(envValue("A", "1"), envSecret("TOKEN", "github", "token"))),
			want: policy.Stdio{Runtime: v1alpha1.RuntimePod, Pod: &policy.Pod{
				Image: "srv:1", ImagePullPolicy: corev1.PullIfNotPresent, Resources: defaults,
				Env: []corev1.EnvVar{envValue("A", "1"), envSecret("TOKEN", "github", "token")}}}},
		{name: "imagePullPolicy on a Local server is harmless and ignored", cfg: allLocal,
			spec: stdioSpec(withPull(corev1.PullIfNotPresent)),
			want: policy.Stdio{Runtime: v1alpha1.RuntimeLocal}},
		{name: "an empty resources block on a Local server is no Pod-only field", cfg: allLocal,
			spec: stdioSpec(withResources(corev1.ResourceRequirements{})),
			want: policy.Stdio{Runtime: v1alpha1.RuntimeLocal}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Resolve(testNS, objName, tc.spec, policy.Values{secretRef("github", "token"): "s3cr3t"}, tc.cfg)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			got := *p.Stdio
			got.Command, got.Args, got.Env, got.Cwd = "", nil, nil, ""
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Stdio =\n  %+v (Pod %+v)\nwant\n  %+v (Pod %+v)", got, got.Pod, tc.want, tc.want.Pod)
			}
		})
	}
}

func TestResolveRefusesBadRuntimeFields(t *testing.T) {
	longImage := "r.io/" + strings.Repeat("a", 1020)
	for _, tc := range []struct {
		name  string
		cfg   policy.RuntimeConfig
		spec  *v1alpha1.McpServerSpec
		field string
		typ   field.ErrorType
		says  []string
	}{
		// No default image.
		{name: "no image and no default image for the command", cfg: noLocal, spec: stdioSpec(withCommand("/opt/srv/run")),
			field: "spec.stdio.image", typ: field.ErrorTypeRequired, says: []string{"required on this cluster", `"run"`}},

		// Pod-only fields on a Local server.
		{name: "resources on a Local server", cfg: allLocal,
			spec:  stdioSpec(withResources(corev1.ResourceRequirements{Limits: quantities("cpu", "1")})),
			field: "spec.stdio.resources", typ: field.ErrorTypeForbidden, says: []string{"only to the Pod runtime", "set spec.stdio.image"}},
		{name: "serviceAccountName on a Local server", cfg: policy.RuntimeConfig{LocalNamespaces: []string{testNS}}, spec: stdioSpec(withSA("runner")),
			field: "spec.stdio.serviceAccountName", typ: field.ErrorTypeForbidden, says: []string{"only to the Pod runtime", "set spec.stdio.image"}},

		// Image references, as the kubelet parses them.
		{name: "image with a space", cfg: noLocal, spec: stdioSpec(withImage("ghcr.io/org/srv :1")),
			field: "spec.stdio.image", typ: field.ErrorTypeInvalid, says: []string{"image reference"}},
		{name: "image with an upper-case repository", cfg: noLocal, spec: stdioSpec(withImage("ghcr.io/Org/srv:1")),
			field: "spec.stdio.image", typ: field.ErrorTypeInvalid},
		{name: "image with an empty tag", cfg: noLocal, spec: stdioSpec(withImage("srv:")),
			field: "spec.stdio.image", typ: field.ErrorTypeInvalid},
		{name: "image that is only a tag", cfg: noLocal, spec: stdioSpec(withImage(":1")),
			field: "spec.stdio.image", typ: field.ErrorTypeInvalid},
		{name: "image with a short digest", cfg: noLocal, spec: stdioSpec(withImage("srv@sha256:abc")),
			field: "spec.stdio.image", typ: field.ErrorTypeInvalid},
		{name: "image with a scheme", cfg: noLocal, spec: stdioSpec(withImage("https://ghcr.io/org/srv")),
			field: "spec.stdio.image", typ: field.ErrorTypeInvalid},
		{name: "image that is 64 hex digits", cfg: noLocal, spec: stdioSpec(withImage(strings.TrimPrefix(digest, "sha256:"))),
			field: "spec.stdio.image", typ: field.ErrorTypeInvalid},
		{name: "image of 1025 characters", cfg: noLocal, spec: stdioSpec(withImage(longImage)),
			field: "spec.stdio.image", typ: field.ErrorTypeTooLong},

		// The Pod-only fields' own rules.
		{name: "imagePullPolicy outside the enum", cfg: noLocal, spec: stdioSpec(withImage("srv:1"), withPull("Sometimes")),
			field: "spec.stdio.imagePullPolicy", typ: field.ErrorTypeNotSupported},
		{name: "serviceAccountName with an underscore", cfg: noLocal, spec: stdioSpec(withImage("srv:1"), withSA("mcp_runner")),
			field: "spec.stdio.serviceAccountName", typ: field.ErrorTypeInvalid},
		{name: "serviceAccountName of 254 characters", cfg: noLocal, spec: stdioSpec(withImage("srv:1"), withSA(strings.Repeat("a", 254))),
			field: "spec.stdio.serviceAccountName", typ: field.ErrorTypeInvalid},
		{name: "resources with a claim", cfg: noLocal, spec: stdioSpec(withImage("srv:1"),
			withResources(corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}})),
			field: "spec.stdio.resources.claims", typ: field.ErrorTypeForbidden},
		{name: "resources limiting a GPU", cfg: noLocal, spec: stdioSpec(withImage("srv:1"),
			withResources(corev1.ResourceRequirements{Limits: quantities("nvidia.com/gpu", "1")})),
			field: "spec.stdio.resources.limits[nvidia.com/gpu]", typ: field.ErrorTypeNotSupported},
		{name: "resources with a negative request", cfg: noLocal, spec: stdioSpec(withImage("srv:1"),
			withResources(corev1.ResourceRequirements{Requests: quantities("memory", "-1Mi")})),
			field: "spec.stdio.resources.requests[memory]", typ: field.ErrorTypeInvalid},
		{name: "resources with a request above its limit", cfg: noLocal, spec: stdioSpec(withImage("srv:1"),
			withResources(corev1.ResourceRequirements{Requests: quantities("cpu", "2"), Limits: quantities("cpu", "1")})),
			field: "spec.stdio.resources.requests[cpu]", typ: field.ErrorTypeInvalid, says: []string{"less than or equal to the limit 1"}},

		// What the container takes from the spec.
		{name: "a relative cwd in the Pod runtime", cfg: noLocal, spec: stdioSpec(withImage("srv:1"), withCwd("work")),
			field: "spec.stdio.cwd", typ: field.ErrorTypeInvalid, says: []string{"absolute path in the Pod runtime"}},
		{name: "an env name with a control character in the Pod runtime", cfg: noLocal,
			spec:  stdioSpec(withImage("srv:1"), withEnv(envValue("A\tB", "1"))),
			field: "spec.stdio.env[0].name", typ: field.ErrorTypeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Resolve(testNS, objName, tc.spec, nil, tc.cfg)
			if p != nil {
				t.Errorf("Resolve returned a policy with an error: %v", p)
			}
			errs := invalidErrs(t, err)
			var found bool
			for _, e := range errs {
				if e.Field != tc.field {
					t.Errorf("unexpected error on another field: %v", e)
					continue
				}
				found = true
				if e.Type != tc.typ {
					t.Errorf("error on %s has type %q, want %q (%v)", e.Field, e.Type, tc.typ, e)
				}
			}
			if !found {
				t.Fatalf("no error names %s; got %v", tc.field, errs)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err.Error() = %q, does not say %q", err.Error(), s)
				}
			}
		})
	}
}

func TestResolveAcceptsRuntimeEdges(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  policy.RuntimeConfig
		spec *v1alpha1.McpServerSpec
	}{
		{name: "a Docker Hub short name", cfg: noLocal, spec: stdioSpec(withImage("nginx"))},
		{name: "a registry with a port", cfg: noLocal, spec: stdioSpec(withImage("localhost:5000/org/srv:1.2"))},
		{name: "a digest", cfg: noLocal, spec: stdioSpec(withImage("ghcr.io/org/srv@" + digest))},
		{name: "a tag and a digest", cfg: noLocal, spec: stdioSpec(withImage("ghcr.io/org/srv:1.2@" + digest))},
		{name: "an IPv6 registry", cfg: noLocal, spec: stdioSpec(withImage("[fd00::1]:5000/srv:1"))},
		{name: "a tag of 128 characters", cfg: noLocal, spec: stdioSpec(withImage("srv:" + strings.Repeat("t", 128)))},
		{name: "every pull policy: Always", cfg: noLocal, spec: stdioSpec(withImage("srv:1"), withPull(corev1.PullAlways))},
		{name: "every pull policy: Never", cfg: noLocal, spec: stdioSpec(withImage("srv:1"), withPull(corev1.PullNever))},
		{name: "a dotted serviceAccountName of 253 characters", cfg: noLocal,
			spec: stdioSpec(withImage("srv:1"), withSA(strings.Repeat("a", 126)+"."+strings.Repeat("b", 126)))},
		{name: "request equal to limit, ephemeral-storage too", cfg: noLocal, spec: stdioSpec(withImage("srv:1"),
			withResources(corev1.ResourceRequirements{
				Requests: quantities("cpu", "1", "ephemeral-storage", "1Gi"),
				Limits:   quantities("cpu", "1000m", "ephemeral-storage", "1Gi")}))},
		{name: "zero quantities", cfg: noLocal, spec: stdioSpec(withImage("srv:1"),
			withResources(corev1.ResourceRequirements{Requests: quantities("cpu", "0")}))},
		{name: "an absolute cwd in the Pod runtime", cfg: noLocal, spec: stdioSpec(withImage("srv:1"), withCwd("/work"))},
		{name: "a relative cwd in the Local runtime", cfg: allLocal, spec: stdioSpec(withCwd("work"))},
		{name: "an env name with a dot and a dash in the Pod runtime", cfg: noLocal,
			spec: stdioSpec(withImage("srv:1"), withEnv(envValue("my.var-1", "x")))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := policy.Resolve(testNS, objName, tc.spec, nil, tc.cfg); err != nil {
				t.Errorf("Resolve: %v", err)
			}
		})
	}
}

func TestCombineResources(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec *corev1.ResourceRequirements
		want corev1.ResourceRequirements
	}{
		{name: "nil takes every default", spec: nil, want: corev1.ResourceRequirements{
			Requests: quantities("cpu", "50m", "memory", "64Mi"), Limits: quantities("cpu", "500m", "memory", "256Mi")}},
		{name: "empty takes every default", spec: &corev1.ResourceRequirements{}, want: corev1.ResourceRequirements{
			Requests: quantities("cpu", "50m", "memory", "64Mi"), Limits: quantities("cpu", "500m", "memory", "256Mi")}},
		{name: "the spec's values win, each side on its own",
			spec: &corev1.ResourceRequirements{Requests: quantities("cpu", "100m"), Limits: quantities("memory", "512Mi")},
			want: corev1.ResourceRequirements{
				Requests: quantities("cpu", "100m", "memory", "64Mi"), Limits: quantities("cpu", "500m", "memory", "512Mi")}},
		{name: "a limit below the default request is the request as well",
			spec: &corev1.ResourceRequirements{Limits: quantities("cpu", "20m", "memory", "32Mi")},
			want: corev1.ResourceRequirements{
				Requests: quantities("cpu", "20m", "memory", "32Mi"), Limits: quantities("cpu", "20m", "memory", "32Mi")}},
		{name: "a request above the default limit is the limit as well",
			spec: &corev1.ResourceRequirements{Requests: quantities("cpu", "2", "memory", "1Gi")},
			want: corev1.ResourceRequirements{
				Requests: quantities("cpu", "2", "memory", "1Gi"), Limits: quantities("cpu", "2", "memory", "1Gi")}},
		{name: "ephemeral-storage has no default and is kept",
			spec: &corev1.ResourceRequirements{Limits: quantities("ephemeral-storage", "2Gi")},
			want: corev1.ResourceRequirements{
				Requests: quantities("cpu", "50m", "memory", "64Mi"),
				Limits:   quantities("cpu", "500m", "memory", "256Mi", "ephemeral-storage", "2Gi")}},
		{name: "both sides set are kept as they are",
			spec: &corev1.ResourceRequirements{Requests: quantities("cpu", "1", "memory", "1Gi"), Limits: quantities("cpu", "2", "memory", "2Gi")},
			want: corev1.ResourceRequirements{Requests: quantities("cpu", "1", "memory", "1Gi"), Limits: quantities("cpu", "2", "memory", "2Gi")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before *corev1.ResourceRequirements
			if tc.spec != nil {
				before = tc.spec.DeepCopy()
			}
			got := policy.CombineResources(tc.spec)
			if !resourcesEqual(got, tc.want) {
				t.Errorf("CombineResources =\n  %v\nwant\n  %v", got, tc.want)
			}
			if tc.spec != nil && !reflect.DeepEqual(tc.spec, before) {
				t.Errorf("CombineResources changed its argument: %v, was %v", tc.spec, before)
			}
			for name, req := range got.Requests {
				if limit, ok := got.Limits[name]; ok && req.Cmp(limit) > 0 {
					t.Errorf("request %s %s above its limit %s", name, req.String(), limit.String())
				}
			}
		})
	}
}

// resourcesEqual compares quantities by value (1 and 1000m are equal).
func resourcesEqual(a, b corev1.ResourceRequirements) bool {
	same := func(x, y corev1.ResourceList) bool {
		if len(x) != len(y) {
			return false
		}
		for n, q := range x {
			if o, ok := y[n]; !ok || q.Cmp(o) != 0 {
				return false
			}
		}
		return true
	}
	return same(a.Requests, b.Requests) && same(a.Limits, b.Limits) && len(a.Claims) == len(b.Claims)
}

func TestFingerprintCoversTheRuntime(t *testing.T) {
	base := func() *v1alpha1.McpServerSpec {
		return stdioSpec(withCommand("npx"), withEnv(envSecret("TOKEN", "github", "token")))
	}
	values := policy.Values{secretRef("github", "token"): "s3cr3t", secretRef("github-copy", "token"): "s3cr3t"}
	fp := func(cfg policy.RuntimeConfig, spec *v1alpha1.McpServerSpec) string {
		t.Helper()
		p, err := policy.Resolve(testNS, objName, spec, values, cfg)
		if err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		return p.Fingerprint()
	}
	pod := fp(noLocal, base())
	for _, tc := range []struct {
		name   string
		cfg    policy.RuntimeConfig
		spec   *v1alpha1.McpServerSpec
		change bool
	}{
		{name: "the same spec and config", cfg: noLocal, spec: base()},
		{name: "Local instead of Pod", cfg: allLocal, spec: base(), change: true},
		{name: "another default image", cfg: customImages, spec: base(), change: true},
		{name: "an explicit image", cfg: noLocal, spec: func() *v1alpha1.McpServerSpec {
			s := base()
			withImage("ghcr.io/org/srv:1")(s)
			return s
		}(), change: true},
		{name: "a pull policy", cfg: noLocal, spec: func() *v1alpha1.McpServerSpec {
			s := base()
			withPull(corev1.PullAlways)(s)
			return s
		}(), change: true},
		{name: "resources", cfg: noLocal, spec: func() *v1alpha1.McpServerSpec {
			s := base()
			withResources(corev1.ResourceRequirements{Limits: quantities("memory", "1Gi")})(s)
			return s
		}(), change: true},
		{name: "a service account", cfg: noLocal, spec: func() *v1alpha1.McpServerSpec {
			s := base()
			withSA("runner")(s)
			return s
		}(), change: true},
		{name: "an env reference to another Secret with the same value", cfg: noLocal, spec: func() *v1alpha1.McpServerSpec {
			s := base()
			s.Stdio.Env[0].ValueFrom.SecretKeyRef.Name = "github-copy"
			return s
		}(), change: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if changed := fp(tc.cfg, tc.spec) != pod; changed != tc.change {
				t.Errorf("fingerprint changed = %v, want %v", changed, tc.change)
			}
		})
	}
}

func TestPodPolicyRedactsSecrets(t *testing.T) {
	spec := stdioSpec(withImage("ghcr.io/org/srv:1"),
		withEnv(envSecret("GITHUB_TOKEN", "github", "token"), envValue("LITERAL", envLiteralValue)))
	p, err := policy.Resolve(testNS, objName, spec, secretValues(), noLocal)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	for how, out := range renderings(t, p) {
		for _, s := range []string{envSecretValue, envLiteralValue} {
			if strings.Contains(out, s) {
				t.Errorf("%s leaks %q:\n%s", how, s, out)
			}
		}
		for _, s := range []string{"ghcr.io/org/srv:1", "Pod", "GITHUB_TOKEN"} {
			if !strings.Contains(out, s) {
				t.Errorf("%s does not show %q:\n%s", how, s, out)
			}
		}
	}
}
