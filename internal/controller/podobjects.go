package controller

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
)

// The objects of the Pod runtime, as the reconciler keeps them: the token
// Secret (its credentials renewed with every new Pod template), the
// Deployment and the NetworkPolicy (created, updated when their rendering
// changes), all owned by the McpServer and removed when the server no
// longer runs in a Pod. podruntime renders them.
// See docs/design.md, "The server's Pod".

// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// Owner references that block the owner's deletion need this where the
// OwnerReferencesPermissionEnforcement admission plugin runs.
// +kubebuilder:rbac:groups=mcpbridge.dev,resources=mcpservers/finalizers,verbs=update

// foreignObjectError: an object with the name of one of the server's Pod
// runtime objects exists and belongs to someone else.
type foreignObjectError struct {
	kind string
	name string
}

func (e *foreignObjectError) Error() string {
	return fmt.Sprintf("The %s %q exists and is not owned by this McpServer; delete or rename it, and this server's Pod is created",
		e.kind, e.name)
}

// errRecreate: an object that could not be used was deleted (one left by
// an earlier McpServer of the same name and not yet garbage-collected, a
// token Secret emptied by hand); the reconcile is retried to create it anew.
var errRecreate = errors.New("deleted an object to create it anew")

// ensureCredentials returns the credentials of obj's Pod (the token and
// the shim's key pair) and its Deployment rendered with them. The
// credentials are issued anew whenever the Pod template changes (a roll):
// the token Secret records the template hash it was issued for, and a
// rendering with another hash under the old token replaces the Secret's
// credentials, which makes a new hash again. The Secret is read with the
// uncached reader: Secret data is never cached, and after a manager restart
// the credentials come back from there. See docs/design.md, "The shim and
// the tunnel".
func (r *McpServerReconciler) ensureCredentials(ctx context.Context, obj *v1alpha1.McpServer,
	render func(token string) (*appsv1.Deployment, error)) (podruntime.Credentials, *appsv1.Deployment, error) {
	key := types.NamespacedName{Namespace: obj.Namespace, Name: podruntime.TokenSecretName(obj.Name)}
	s := &corev1.Secret{}
	err := r.APIReader.Get(ctx, key, s)
	switch {
	case apierrors.IsNotFound(err):
		s = nil
	case err != nil:
		return podruntime.Credentials{}, nil, fmt.Errorf("read the token Secret %s: %w", key, err)
	default:
		if err := r.claim(ctx, s, obj, "Secret"); err != nil {
			return podruntime.Credentials{}, nil, err
		}
		if c, cerr := podruntime.CredentialsOf(s); cerr == nil {
			deploy, err := render(c.Token)
			if err != nil || s.Annotations[podruntime.IssuedForAnnotation] == templateHashOf(deploy) {
				return c, deploy, err
			}
		}
	}
	return r.issueCredentials(ctx, obj, s, render)
}

// issueCredentials writes fresh credentials into the token Secret (cur,
// or a new one when cur is nil), recording the hash of the template they
// are issued for.
func (r *McpServerReconciler) issueCredentials(ctx context.Context, obj *v1alpha1.McpServer, cur *corev1.Secret,
	render func(token string) (*appsv1.Deployment, error)) (podruntime.Credentials, *appsv1.Deployment, error) {
	c, err := podruntime.NewCredentials(obj)
	if err != nil {
		return podruntime.Credentials{}, nil, err
	}
	deploy, err := render(c.Token)
	if err != nil {
		return podruntime.Credentials{}, nil, err
	}
	want := podruntime.TokenSecret(obj, c, templateHashOf(deploy))
	if cur == nil {
		if err := r.Client.Create(ctx, want); err != nil {
			return podruntime.Credentials{}, nil, fmt.Errorf("create the token Secret %s: %w", want.Name, err)
		}
		return c, deploy, nil
	}
	// An update of the version read: should another write have come
	// between, the Conflict retries the reconcile.
	cur.Data, cur.Type = want.Data, want.Type
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[podruntime.IssuedForAnnotation] = want.Annotations[podruntime.IssuedForAnnotation]
	if err := r.Client.Update(ctx, cur); err != nil {
		return podruntime.Credentials{}, nil, fmt.Errorf("renew the credentials in the token Secret %s: %w", cur.Name, err)
	}
	return c, deploy, nil
}

func templateHashOf(d *appsv1.Deployment) string {
	return d.Spec.Template.Annotations[podruntime.TemplateHashAnnotation]
}

// applyNetworkPolicy creates want, or patches the existing one when its
// spec differs.
func (r *McpServerReconciler) applyNetworkPolicy(ctx context.Context, obj *v1alpha1.McpServer, want *networkingv1.NetworkPolicy) error {
	return applyOwned(ctx, r, obj, "NetworkPolicy", want, &networkingv1.NetworkPolicy{},
		func(want, cur *networkingv1.NetworkPolicy) bool {
			return equality.Semantic.DeepEqual(want.Spec, cur.Spec)
		},
		func(want, cur *networkingv1.NetworkPolicy) { cur.Spec = want.Spec })
}

// applyDeployment creates want, or patches the existing Deployment when
// its rendering differs (a new template hash, or a spec edited by hand).
func (r *McpServerReconciler) applyDeployment(ctx context.Context, obj *v1alpha1.McpServer, want *appsv1.Deployment) error {
	return applyOwned(ctx, r, obj, "Deployment", want, &appsv1.Deployment{},
		func(want, cur *appsv1.Deployment) bool { return equality.Semantic.DeepDerivative(want.Spec, cur.Spec) },
		func(want, cur *appsv1.Deployment) { cur.Spec = want.Spec })
}

// applyOwned creates want, or claims the existing object of its name and
// patches it when sameSpec says its spec differs or a label of want is
// missing; setSpec copies want's spec onto it. The existing object is read
// from the label-selected cache, stripped: a merge patch, not an update,
// because an update would delete the annotations and managedFields the
// cache strips (StripUnread), and the resourceVersion in the patch keeps it
// as optimistic as an update.
func applyOwned[T client.Object](ctx context.Context, r *McpServerReconciler, obj *v1alpha1.McpServer, kind string,
	want, cur T, sameSpec func(want, cur T) bool, setSpec func(want, cur T)) error {
	key := client.ObjectKeyFromObject(want)
	err := r.Client.Get(ctx, key, cur)
	switch {
	case apierrors.IsNotFound(err):
		err = r.Client.Create(ctx, want)
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		// Not in the cache: ours, created a moment ago, or one without our
		// labels, which the cache does not hold.
		if err := r.APIReader.Get(ctx, key, cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		return r.claim(ctx, cur, obj, kind)
	case err != nil:
		return err
	}
	if err := r.claim(ctx, cur, obj, kind); err != nil {
		return err
	}
	if sameSpec(want, cur) && equality.Semantic.DeepDerivative(want.GetLabels(), cur.GetLabels()) {
		return nil
	}
	patch := client.MergeFromWithOptions(cur.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	setSpec(want, cur)
	labels := cur.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range want.GetLabels() {
		labels[k] = v
	}
	cur.SetLabels(labels)
	return r.Client.Patch(ctx, cur, patch)
}

// claim accepts an existing object only when obj controls it. One left by
// an earlier McpServer of the same name is deleted (errRecreate);
// anything else is someone else's (*foreignObjectError).
func (r *McpServerReconciler) claim(ctx context.Context, o client.Object, obj *v1alpha1.McpServer, kind string) error {
	ref := metav1.GetControllerOfNoCopy(o)
	switch {
	case ref != nil && ref.UID == obj.UID:
		return nil
	case ownedByServer(o, obj.Name):
		if err := r.deleteOwned(ctx, o); err != nil {
			return err
		}
		return errRecreate
	}
	return &foreignObjectError{kind: kind, name: o.GetName()}
}

// removePodObjects deletes the Deployment, the NetworkPolicy and the token
// Secret of the McpServer name, if they exist and an McpServer of that name
// controls them. All are read from caches: the Deployment and the
// NetworkPolicy from the label-selected one, the Secret as metadata only.
func (r *McpServerReconciler) removePodObjects(ctx context.Context, namespace, name string) error {
	d := &appsv1.Deployment{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: podruntime.DeploymentName(name)}, d)
	if err == nil && ownedByServer(d, name) {
		err = r.deleteOwned(ctx, d)
	}
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	np := &networkingv1.NetworkPolicy{}
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: podruntime.DeploymentName(name)}, np)
	if err == nil && ownedByServer(np, name) {
		err = r.deleteOwned(ctx, np)
	}
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	s := &metav1.PartialObjectMetadata{}
	s.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: podruntime.TokenSecretName(name)}, s)
	if err == nil && ownedByServer(s, name) {
		err = r.deleteOwned(ctx, s)
	}
	return client.IgnoreNotFound(err)
}

// deleteOwned deletes o, only the version read (a UID precondition), and
// lets the garbage collector remove what o owns (a Deployment's Pods).
func (r *McpServerReconciler) deleteOwned(ctx context.Context, o client.Object) error {
	uid := o.GetUID()
	err := r.Client.Delete(ctx, o, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	return client.IgnoreNotFound(err)
}

// ownedByServer: an McpServer named name controls o.
func ownedByServer(o metav1.Object, name string) bool {
	ref := metav1.GetControllerOfNoCopy(o)
	if ref == nil || ref.Kind != "McpServer" || ref.Name != name {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == v1alpha1.GroupVersion.Group
}
