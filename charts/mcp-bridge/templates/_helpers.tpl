{{/* The chart's name, or nameOverride. */}}
{{- define "mcp-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: fullnameOverride, else the release name
if it already holds the chart's name, else <release>-<chart>. Truncated so
that the longest suffix below (-leader-election) still fits in 63.
*/}}
{{- define "mcp-bridge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 46 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 46 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 46 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mcp-bridge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "mcp-bridge.labels" -}}
helm.sh/chart: {{ include "mcp-bridge.chart" . }}
{{ include "mcp-bridge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mcpbridge
{{- end }}

{{/* Labels that select the manager's pods (and, on Services, each Service). */}}
{{- define "mcp-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcp-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcp-bridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-manager" (include "mcp-bridge.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "mcp-bridge.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Where a metrics.certSecret is mounted: --metrics-cert-path. */}}
{{- define "mcp-bridge.metricsCertPath" -}}
/etc/mcpbridge/metrics-certs
{{- end }}

{{/* Where gateway.tls.secretName is mounted: --gateway-cert-dir. */}}
{{- define "mcp-bridge.gatewayCertDir" -}}
/etc/mcpbridge/gateway-certs
{{- end }}

{{/* The gateway's scheme: https unless gateway.tls.enabled is false. */}}
{{- define "mcp-bridge.gatewayScheme" -}}
{{- ternary "https" "http" .Values.gateway.tls.enabled }}
{{- end }}

{{/* The Secret mounted as --gateway-cert-dir: gateway.tls.secretName, or
cert-manager's <fullname>-gateway-tls; empty when the manager issues its own. */}}
{{- define "mcp-bridge.gatewayCertSecret" -}}
{{- with .Values.gateway.tls }}
{{- if and .enabled .certManager.enabled }}
{{- .secretName | default (printf "%s-gateway-tls" (include "mcp-bridge.fullname" $)) }}
{{- else if .enabled }}
{{- .secretName }}
{{- end }}
{{- end }}
{{- end }}

{{/* The gateway certificate's DNS names: its Service's, then extraDNSNames. */}}
{{- define "mcp-bridge.gatewayDNSNames" -}}
{{- $svc := printf "%s-gateway" (include "mcp-bridge.fullname" .) }}
{{- $ns := .Release.Namespace }}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) }}
{{- concat $names .Values.gateway.tls.extraDNSNames | toJson }}
{{- end }}

{{/*
The manager's arguments, one section per part of the manager. Flags that a
newer manager adds get a value and a line in their section here (and in
values.schema.json); manager.extraArgs comes last, so it can override.
*/}}
{{- define "mcp-bridge.args" -}}
{{- if .Values.leaderElection.enabled }}
- --leader-elect
{{- end }}
{{- /* replicas: name and address from POD_NAME and POD_IP */}}
- --replica-lease-duration={{ .Values.replica.leaseDuration }}
- --replica-bind-address=:{{ .Values.replica.port }}
{{- /* metrics */}}
{{- if .Values.metrics.enabled }}
- --metrics-bind-address=:{{ .Values.metrics.port }}
{{- else }}
- --metrics-bind-address=0
{{- end }}
{{- if .Values.metrics.secure }}
- --metrics-secure
{{- if .Values.metrics.certSecret }}
- --metrics-cert-path={{ include "mcp-bridge.metricsCertPath" . }}
{{- end }}
{{- else }}
- --metrics-secure=false
{{- end }}
{{- if .Values.manager.enableHTTP2 }}
- --enable-http2
{{- end }}
- --health-probe-bind-address=:{{ .Values.manager.probePort }}
{{- /* gateway */}}
{{- if eq .Values.gateway.auth "none" }}
- --gateway-bind-address=127.0.0.1:{{ .Values.gateway.port }}
- --gateway-auth=none
{{- else }}
- --gateway-bind-address=:{{ .Values.gateway.port }}
- --gateway-token-audiences={{ join "," .Values.gateway.tokenAudiences }}
{{- end }}
{{- if not .Values.gateway.tls.enabled }}
- --gateway-tls=false
{{- else if include "mcp-bridge.gatewayCertSecret" . }}
- --gateway-cert-dir={{ include "mcp-bridge.gatewayCertDir" . }}
{{- else }}
- --gateway-dns-names={{ include "mcp-bridge.gatewayDNSNames" . | fromJsonArray | join "," }}
{{- end }}
{{- /* budgets */}}
{{- with .Values.budgets }}
- --gateway-max-sessions-per-identity={{ .sessionsPerIdentity }}
- --gateway-max-sessions-per-namespace={{ .sessionsPerNamespace }}
- --gateway-max-inflight-calls-per-identity={{ .inflightCallsPerIdentity }}
- --gateway-max-inflight-calls-per-namespace={{ .inflightCallsPerNamespace }}
- --gateway-max-result-bytes-per-namespace={{ .resultBytesPerNamespace }}
- --max-tool-bytes-per-namespace={{ .toolBytesPerNamespace }}
- --gateway-token-review-qps={{ .tokenReviews.qps }}
- --gateway-token-review-burst={{ .tokenReviews.burst }}
- --gateway-token-review-qps-per-source={{ .tokenReviewsPerSource.qps }}
- --gateway-token-review-burst-per-source={{ .tokenReviewsPerSource.burst }}
- --gateway-access-review-qps-per-identity={{ .accessReviewsPerIdentity.qps }}
- --gateway-access-review-burst-per-identity={{ .accessReviewsPerIdentity.burst }}
- --gateway-max-access-reviews-per-request={{ .accessReviewsPerRequest }}
{{- end }}
{{- /* reconciler */}}
{{- with .Values.manager.watchNamespaces }}
- --watch-namespaces={{ join "," . }}
{{- end }}
{{- /* stdio runtimes */}}
{{- with .Values.stdio.localNamespaces }}
- --local-stdio-namespaces={{ join "," . }}
{{- end }}
- --shim-image={{ .Values.stdio.images.shim | default (include "mcp-bridge.image" .) }}
{{- with .Values.stdio.images.node }}
- --node-image={{ . }}
{{- end }}
{{- with .Values.stdio.images.python }}
- --python-image={{ . }}
{{- end }}
{{- /* floors and ceilings */}}
{{- with .Values.limits }}
{{- if .minReconnectDelay }}
- --min-reconnect-delay={{ .minReconnectDelay }}
{{- end }}
{{- if .minHealthCheckInterval }}
- --min-health-check-interval={{ .minHealthCheckInterval }}
{{- end }}
{{- if .maxToolCallTimeout }}
- --max-tool-call-timeout={{ .maxToolCallTimeout }}
{{- end }}
{{- if .maxConnectionTimeout }}
- --max-connection-timeout={{ .maxConnectionTimeout }}
{{- end }}
{{- end }}
{{- /* supervisors */}}
{{- with .Values.egress.upstreamAllowCIDRs }}
- --upstream-allow-cidrs={{ join "," . }}
{{- end }}
{{- /* logging */}}
{{- with .Values.manager.log }}
{{- if .development }}
- --zap-devel
{{- end }}
{{- if .level }}
- --zap-log-level={{ .level }}
{{- end }}
{{- if .encoder }}
- --zap-encoder={{ .encoder }}
{{- end }}
{{- if .stacktraceLevel }}
- --zap-stacktrace-level={{ .stacktraceLevel }}
{{- end }}
{{- if .timeEncoding }}
- --zap-time-encoding={{ .timeEncoding }}
{{- end }}
{{- end }}
{{- range .Values.manager.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The manager container's environment: POD_NAME and POD_IP, the defaults of
--replica-name and --replica-advertise-address; the OTEL_* variables of
tracing (the manager reads them at start; none set is tracing off), then
tracing.env, then manager.extraEnv.
*/}}
{{- define "mcp-bridge.env" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
{{- with .Values.tracing }}
{{- if .endpoint }}
- {name: OTEL_EXPORTER_OTLP_ENDPOINT, value: {{ .endpoint | quote }}}
- {name: OTEL_EXPORTER_OTLP_PROTOCOL, value: {{ .protocol | quote }}}
{{- end }}
{{- if .samplerRatio }}
- {name: OTEL_TRACES_SAMPLER, value: parentbased_traceidratio}
- {name: OTEL_TRACES_SAMPLER_ARG, value: {{ .samplerRatio | quote }}}
{{- end }}
{{- with .env }}
{{ toYaml . }}
{{- end }}
{{- end }}
{{- with .Values.manager.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
A ValidatingAdmissionPolicy from files/admission (.file), named .name, and
its binding. The manager-writes policy matches this release's ServiceAccount:
its match condition "manager" is written here, as config/default writes it
with a replacement.
*/}}
{{- define "mcp-bridge.admissionPolicy" -}}
{{- $root := .root }}
{{- $path := printf "files/admission/%s" .file }}
{{- $policy := $root.Files.Get $path | fromYaml }}
{{- if or (not $policy) (hasKey $policy "Error") }}
{{- fail (printf "%s is missing or not YAML: run `make manifests`" $path) }}
{{- end }}
{{- $_ := set $policy "metadata" (dict "name" .name "labels" (include "mcp-bridge.labels" $root | fromYaml)) }}
{{- $conditions := list }}
{{- range $policy.spec.matchConditions }}
{{- if eq .name "manager" }}
{{- $user := printf "system:serviceaccount:%s:%s" $root.Release.Namespace (include "mcp-bridge.serviceAccountName" $root) }}
{{- $conditions = append $conditions (dict "name" "manager" "expression" (printf "request.userInfo.username == '%s'" $user)) }}
{{- else }}
{{- $conditions = append $conditions . }}
{{- end }}
{{- end }}
{{- if $conditions }}
{{- $_ := set $policy.spec "matchConditions" $conditions }}
{{- end }}
---
{{ toYaml $policy }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ .name }}
  labels:
    {{- include "mcp-bridge.labels" $root | nindent 4 }}
spec:
  policyName: {{ .name }}
  validationActions: [Deny]
{{- end }}
