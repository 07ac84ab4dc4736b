package podruntime_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
)

func TestDeploymentAsRendered(t *testing.T) {
	got := render(t, server())
	labels := map[string]string{"app.kubernetes.io/managed-by": "mcpbridge", "mcpbridge.dev/server": "github"}
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
	}
	probe := func(path string, period int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromString("shim"), Scheme: corev1.URISchemeHTTPS}},
			PeriodSeconds: period, TimeoutSeconds: 1, FailureThreshold: 3, SuccessThreshold: 1,
		}
	}
	q := resource.MustParse
	want := &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "github-mcp", Namespace: "agents", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "mcpbridge.dev/v1alpha1", Kind: "McpServer", Name: "github", UID: "6f1e2d3c-uid",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To[int32](1),
			Strategy:             appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Selector:             &metav1.LabelSelector{MatchLabels: labels},
			RevisionHistoryLimit: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      labels,
					Annotations: map[string]string{"mcpbridge.dev/template-hash": got.Spec.Template.Annotations["mcpbridge.dev/template-hash"]},
				},
				Spec: corev1.PodSpec{
					InitContainers: []corev1.Container{{
						Name:            "install-shim",
						Image:           shimImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{"/shim", "install", "/mcpbridge/bin/shim"},
						VolumeMounts:    []corev1.VolumeMount{{Name: "shim", MountPath: "/mcpbridge/bin"}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{"cpu": q("10m"), "memory": q("16Mi")},
							Limits:   corev1.ResourceList{"cpu": q("100m"), "memory": q("64Mi")},
						},
						SecurityContext:          restricted,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
					}},
					Containers: []corev1.Container{{
						Name:            "server",
						Image:           policy.DefaultNodeImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"/mcpbridge/bin/shim", "--listen=:7420", "--token-file=/mcpbridge/token/token",
							"--tls-cert-file=/mcpbridge/token/tls.crt", "--tls-key-file=/mcpbridge/token/tls.key",
							"--terminate-grace=1s", "--", "npx", "-y", "@modelcontextprotocol/server-github"},
						Env: []corev1.EnvVar{
							{Name: "HOME", Value: "/tmp"},
							{Name: "LOG_LEVEL", Value: "debug"},
							server().Spec.Stdio.Env[1],
							server().Spec.Stdio.Env[2],
						},
						Ports:          []corev1.ContainerPort{{Name: "shim", ContainerPort: 7420, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: probe("/readyz", 1),
						LivenessProbe:  probe("/healthz", 10),
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{"cpu": q("50m"), "memory": q("64Mi")},
							Limits:   corev1.ResourceList{"cpu": q("500m"), "memory": q("256Mi")},
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "shim", MountPath: "/mcpbridge/bin", ReadOnly: true},
							{Name: "token", MountPath: "/mcpbridge/token", ReadOnly: true},
							{Name: "tmp", MountPath: "/tmp"},
						},
						SecurityContext:          restricted,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
					}},
					Volumes: []corev1.Volume{
						{Name: "shim", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
							SecretName: "github-mcp-token", Items: []corev1.KeyToPath{
								{Key: "token", Path: "token"}, {Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}},
							DefaultMode: ptr.To[int32](0o440)}}},
					},
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To[int64](10),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr.To(true),
						RunAsUser:    ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
				},
			},
		},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("Deployment differs (-want +got):\n%s", cmp.Diff(want, got))
	}
	if h := got.Spec.Template.Annotations[podruntime.TemplateHashAnnotation]; len(h) != 32 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Errorf("template hash %q, want 32 lower-case hex digits", h)
	}
}

// server returns the rendered Deployment's server container.
func serverContainer(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == podruntime.ServerContainer {
			return c
		}
	}
	t.Fatalf("no container %q in %v", podruntime.ServerContainer, d.Spec.Template.Spec.Containers)
	return corev1.Container{}
}

func withStdio(m func(*v1alpha1.StdioTransport)) func(*v1alpha1.McpServer) {
	return func(o *v1alpha1.McpServer) { m(o.Spec.Stdio) }
}

func TestDeploymentFollowsTheSpec(t *testing.T) {
	q := resource.MustParse
	for _, tc := range []struct {
		name  string
		obj   *v1alpha1.McpServer
		opts  func(*podruntime.Options)
		check func(t *testing.T, d *appsv1.Deployment, c corev1.Container)
	}{
		{name: "the spec's image and pull policy",
			obj: server(withStdio(func(s *v1alpha1.StdioTransport) {
				s.Image, s.ImagePullPolicy = "ghcr.io/org/srv:1.2", corev1.PullAlways
			})),
			check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
				if c.Image != "ghcr.io/org/srv:1.2" || c.ImagePullPolicy != corev1.PullAlways {
					t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
				}
				if init := d.Spec.Template.Spec.InitContainers[0]; init.Image != shimImage || init.ImagePullPolicy != corev1.PullIfNotPresent {
					t.Errorf("init container image %q pull %q, want the shim image, IfNotPresent", init.Image, init.ImagePullPolicy)
				}
			}},
		{name: "the shim image's own pull policy", obj: server(),
			opts: func(o *podruntime.Options) { o.ShimImagePullPolicy = corev1.PullNever },
			check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
				if p := d.Spec.Template.Spec.InitContainers[0].ImagePullPolicy; p != corev1.PullNever {
					t.Errorf("init container pull %q, want Never", p)
				}
			}},
		{name: "the default python image for uvx", obj: server(withStdio(func(s *v1alpha1.StdioTransport) { s.Command = "uvx" })),
			check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
				if c.Image != policy.DefaultPythonImage {
					t.Errorf("image %q, want %q", c.Image, policy.DefaultPythonImage)
				}
			}},
		{name: "cwd is the working directory", obj: server(withStdio(func(s *v1alpha1.StdioTransport) { s.Cwd = "/work" })),
			check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
				if c.WorkingDir != "/work" {
					t.Errorf("workingDir %q", c.WorkingDir)
				}
			}},
		{name: "a HOME in the spec replaces /tmp", obj: server(withStdio(func(s *v1alpha1.StdioTransport) {
			s.Env = append(s.Env, corev1.EnvVar{Name: "HOME", Value: "/home/app"})
		})),
			check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
				var homes []string
				for _, e := range c.Env {
					if e.Name == "HOME" {
						homes = append(homes, e.Value)
					}
				}
				if len(homes) != 1 || homes[0] != "/home/app" {
					t.Errorf("HOME = %v, want only /home/app", homes)
				}
			}},
		{name: "$ in command, args and env values stays literal",
			obj: server(withStdio(func(s *v1alpha1.StdioTransport) {
				s.Image, s.Command, s.Args = "srv:1", "/bin/$(CMD)", []string{"--price=$5", "$(HOME)"}
				s.Env = []corev1.EnvVar{{Name: "PATTERN", Value: "$(LOG_LEVEL)$$"}}
			})),
			check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
				tail := c.Command[len(c.Command)-3:]
				if want := []string{"/bin/$$(CMD)", "--price=$$5", "$$(HOME)"}; !equality.Semantic.DeepEqual(tail, want) {
					t.Errorf("command ends %q, want %q", tail, want)
				}
				if v := c.Env[1].Value; v != "$$(LOG_LEVEL)$$$$" {
					t.Errorf("env value %q, want $$(LOG_LEVEL)$$$$", v)
				}
			}},
		{name: "a service account mounts its token",
			obj: server(withStdio(func(s *v1alpha1.StdioTransport) { s.ServiceAccountName = "mcp-runner" })),
			check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
				ps := d.Spec.Template.Spec
				if ps.ServiceAccountName != "mcp-runner" || ps.AutomountServiceAccountToken == nil || !*ps.AutomountServiceAccountToken {
					t.Errorf("serviceAccountName %q automount %v", ps.ServiceAccountName, ps.AutomountServiceAccountToken)
				}
			}},
		{name: "partial resources combine with the defaults",
			obj: server(withStdio(func(s *v1alpha1.StdioTransport) {
				s.Resources = &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{"cpu": q("1")},
					Limits:   corev1.ResourceList{"memory": q("32Mi"), "ephemeral-storage": q("1Gi")},
				}
			})),
			check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
				want := corev1.ResourceRequirements{
					Requests: corev1.ResourceList{"cpu": q("1"), "memory": q("32Mi")},
					Limits:   corev1.ResourceList{"cpu": q("1"), "memory": q("32Mi"), "ephemeral-storage": q("1Gi")},
				}
				if !equality.Semantic.DeepEqual(c.Resources, want) {
					t.Errorf("resources %v, want %v", c.Resources, want)
				}
			}},
		{name: "port and terminate grace from the options", obj: server(),
			opts: func(o *podruntime.Options) { o.Port, o.TerminateGrace = 9000, 1500*time.Millisecond },
			check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
				if c.Ports[0].ContainerPort != 9000 || c.Ports[0].Name != "shim" {
					t.Errorf("ports %v", c.Ports)
				}
				for _, flag := range []string{"--listen=:9000", "--terminate-grace=1.5s"} {
					if !slices.Contains(c.Command, flag) {
						t.Errorf("command %q lacks %s", c.Command, flag)
					}
				}
			}},
		{name: "a long name is shortened in names and labels, never cut in the ownerReference",
			obj: server(func(o *v1alpha1.McpServer) { o.Name, o.Spec.ServerName = strings.Repeat("n", 100), "n" }),
			check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
				name := strings.Repeat("n", 100)
				if d.Name != podruntime.DeploymentName(name) || d.OwnerReferences[0].Name != name {
					t.Errorf("name %q owner %q", d.Name, d.OwnerReferences[0].Name)
				}
				for _, l := range []map[string]string{d.Labels, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels} {
					if l["mcpbridge.dev/server"] != podruntime.LabelValue(name) {
						t.Errorf("server label %q, want %q", l["mcpbridge.dev/server"], podruntime.LabelValue(name))
					}
				}
				if v := d.Spec.Template.Spec.Volumes[2].Secret.SecretName; v != podruntime.TokenSecretName(name) {
					t.Errorf("token volume %q", v)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := opts()
			if tc.opts != nil {
				tc.opts(&o)
			}
			d, err := podruntime.Deployment(tc.obj, resolve(t, tc.obj, values()), testToken, o)
			if err != nil {
				t.Fatalf("Deployment: %v", err)
			}
			tc.check(t, d, serverContainer(t, d))
		})
	}
}

func TestDeploymentRefusesWhatItCannotRender(t *testing.T) {
	obj := server()
	pod := resolve(t, obj, values())
	local, err := policy.Resolve(obj.Namespace, obj.Name, &obj.Spec, values(),
		policy.RuntimeConfig{LocalNamespaces: []string{policy.AllNamespaces}})
	if err != nil {
		t.Fatal(err)
	}
	http := &policy.Policy{Transport: v1alpha1.TransportStreamableHTTP, HTTP: &policy.HTTP{URL: "https://x"}}
	for _, tc := range []struct {
		name  string
		p     *policy.Policy
		token string
		opts  podruntime.Options
	}{
		{name: "no policy", p: nil, token: testToken, opts: opts()},
		{name: "a streamable-http policy", p: http, token: testToken, opts: opts()},
		{name: "a Local policy", p: local, token: testToken, opts: opts()},
		{name: "no shim image", p: pod, token: testToken, opts: podruntime.Options{}},
		{name: "no token", p: pod, token: "", opts: opts()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d, err := podruntime.Deployment(obj, tc.p, tc.token, tc.opts); err == nil {
				t.Errorf("Deployment = %v, want an error", d.Name)
			}
		})
	}
}

func TestDeploymentHoldsNoResolvedValue(t *testing.T) {
	d := render(t, server())
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{secretValue, configMapValue, testToken} {
		if strings.Contains(string(b), s) {
			t.Errorf("the Deployment holds %q:\n%s", s, b)
		}
	}
}
