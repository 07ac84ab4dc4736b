package podruntime

import (
	"errors"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// Names inside the Pod.
const (
	// ServerContainer runs the shim and, behind it, the server: `kubectl
	// logs` of it shows the server's stderr.
	ServerContainer = "server"
	// InstallShimContainer is the init container that copies the shim.
	InstallShimContainer = "install-shim"

	shimVolume  = "shim"
	tokenVolume = "token"
	tmpVolume   = "tmp"
	tmpDir      = "/tmp"
)

// The Pod's user and group: the restricted Pod Security profile needs a
// non-root user, and 65532 is distroless's "nonroot".
const podUser = 65532

// terminationGracePeriod is the kubelet's wait after SIGTERM to the shim,
// which then ends its child within two terminate graces.
const terminationGracePeriod = 10

// Options are the manager's side of the rendering.
type Options struct {
	// ShimImage is the image the init container copies the shim from (the
	// operator's own image, flag --shim-image). Required.
	ShimImage string
	// ShimImagePullPolicy is the init container's pull policy;
	// IfNotPresent when empty.
	ShimImagePullPolicy corev1.PullPolicy
	// Port is the shim's port; ShimPort when 0.
	Port int32
	// TerminateGrace is the shim's wait between stdin close, SIGTERM and
	// SIGKILL; DefaultTerminateGrace when 0.
	TerminateGrace time.Duration
	// ManagerPodLabels select the manager's Pods, the only ones a server
	// Pod's NetworkPolicy admits (flag --manager-pod-labels).
	ManagerPodLabels map[string]string
	// ManagerNamespace is the manager's namespace; empty admits the
	// manager's labels in every namespace.
	ManagerNamespace string
}

func (o Options) withDefaults() Options {
	if o.ShimImagePullPolicy == "" {
		o.ShimImagePullPolicy = corev1.PullIfNotPresent
	}
	if o.Port == 0 {
		o.Port = ShimPort
	}
	if o.TerminateGrace <= 0 {
		o.TerminateGrace = DefaultTerminateGrace
	}
	return o
}

// Deployment is the Deployment that runs obj's server in its own Pod, as the
// resolved policy p says, with token the tunnel token in obj's token Secret.
// p must be obj's policy with the Pod runtime. See docs/design.md, "The
// server's Pod".
func Deployment(obj *v1alpha1.McpServer, p *policy.Policy, token string, opts Options) (*appsv1.Deployment, error) {
	if p == nil || p.Stdio == nil || p.Stdio.Pod == nil {
		return nil, errors.New("podruntime: the policy has no Pod runtime")
	}
	if opts.ShimImage == "" {
		return nil, errors.New("podruntime: no shim image")
	}
	if token == "" {
		return nil, errors.New("podruntime: no tunnel token")
	}
	opts = opts.withDefaults()
	labels := Labels(obj.Name)
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       podSpec(obj.Name, p.Stdio, opts),
	}
	tmpl.Annotations = map[string]string{TemplateHashAnnotation: templateHash(&tmpl, p.Stdio.Env, token)}
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            DeploymentName(obj.Name),
			Namespace:       obj.Namespace,
			Labels:          Labels(obj.Name),
			OwnerReferences: []metav1.OwnerReference{ownerRef(obj)},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			// Recreate: the old Pod is gone before the new one starts, so
			// two children of one server never run at once.
			Strategy:             appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Selector:             &metav1.LabelSelector{MatchLabels: Labels(obj.Name)},
			RevisionHistoryLimit: ptr.To[int32](2),
			Template:             tmpl,
		},
	}, nil
}

// ownerRef makes obj the controller of an object, so that deleting obj
// deletes it (and the Deployment's Pod) and waits for that in foreground
// deletion.
func ownerRef(obj *v1alpha1.McpServer) metav1.OwnerReference {
	return *metav1.NewControllerRef(obj, v1alpha1.GroupVersion.WithKind("McpServer"))
}

func podSpec(name string, s *policy.Stdio, o Options) corev1.PodSpec {
	pod := s.Pod
	install, serve := shimCommandLines(o.Port, o.TerminateGrace, literal(s.Command), literals(s.Args))
	return corev1.PodSpec{
		InitContainers: []corev1.Container{{
			Name:                     InstallShimContainer,
			Image:                    o.ShimImage,
			ImagePullPolicy:          o.ShimImagePullPolicy,
			Command:                  install,
			VolumeMounts:             []corev1.VolumeMount{{Name: shimVolume, MountPath: ShimDir}},
			Resources:                installResources(),
			SecurityContext:          containerSecurity(),
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}},
		Containers: []corev1.Container{{
			Name:            ServerContainer,
			Image:           pod.Image,
			ImagePullPolicy: pod.ImagePullPolicy,
			Command:         serve,
			WorkingDir:      s.Cwd,
			Env:             podEnv(pod.Env),
			Ports:           []corev1.ContainerPort{{Name: ShimPortName, ContainerPort: o.Port, Protocol: corev1.ProtocolTCP}},
			ReadinessProbe:  probe(ReadyzPath, 1),
			LivenessProbe:   probe(HealthzPath, 10),
			Resources:       *pod.Resources.DeepCopy(),
			VolumeMounts: []corev1.VolumeMount{
				{Name: shimVolume, MountPath: ShimDir, ReadOnly: true},
				{Name: tokenVolume, MountPath: TokenDir, ReadOnly: true},
				{Name: tmpVolume, MountPath: tmpDir},
			},
			SecurityContext:          containerSecurity(),
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}},
		Volumes: []corev1.Volume{
			{Name: shimVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: tmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: tokenVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: TokenSecretName(name),
				Items: []corev1.KeyToPath{
					{Key: TokenKey, Path: TokenKey}, {Key: CertKey, Path: CertKey}, {Key: PrivateKeyKey, Path: PrivateKeyKey},
				},
				DefaultMode: ptr.To[int32](0o440), // group-readable: fsGroup is the Pod's group
			}}},
		},
		ServiceAccountName: pod.ServiceAccountName,
		// The server sees the API only through a ServiceAccount it asked
		// for.
		AutomountServiceAccountToken:  ptr.To(pod.ServiceAccountName != ""),
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To[int64](terminationGracePeriod),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To[int64](podUser),
			RunAsGroup:     ptr.To[int64](podUser),
			FSGroup:        ptr.To[int64](podUser),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// containerSecurity is the restricted Pod Security profile for one
// container, with a read-only root filesystem.
func containerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
	}
}

// installResources bound the copy of one static binary, so that a
// namespace whose ResourceQuota needs limits admits the init container.
func installResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
}

func probe(path string, periodSeconds int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			// The kubelet's HTTPS probes do not verify the certificate.
			Path: path, Port: intstr.FromString(ShimPortName), Scheme: corev1.URISchemeHTTPS,
		}},
		PeriodSeconds:    periodSeconds,
		TimeoutSeconds:   1,
		FailureThreshold: 3,
		SuccessThreshold: 1,
	}
}

// podEnv is the spec's env as the container's env, HOME=/tmp first unless
// the spec sets HOME (npx and uvx keep their caches there, and the root
// filesystem is read-only). Literal values are escaped so that the kubelet's
// $(VAR) expansion leaves them as they are, as the Local runtime does.
func podEnv(spec []corev1.EnvVar) []corev1.EnvVar {
	env := make([]corev1.EnvVar, 0, len(spec)+1)
	if !hasEnv(spec, "HOME") {
		env = append(env, corev1.EnvVar{Name: "HOME", Value: tmpDir})
	}
	for _, e := range spec {
		e = *e.DeepCopy()
		e.Value = literal(e.Value)
		env = append(env, e)
	}
	return env
}

func hasEnv(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// literal escapes s against the kubelet's $(VAR) expansion of command, args
// and env values: "$$" stands for "$".
func literal(s string) string { return strings.ReplaceAll(s, "$", "$$") }

func literals(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = literal(s)
	}
	return out
}
