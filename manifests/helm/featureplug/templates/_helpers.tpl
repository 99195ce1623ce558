{{/* The chart's name: app.kubernetes.io/name; nameOverride replaces it. */}}
{{- define "featureplug.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The name of every object: fullnameOverride, else the release name when it
contains the chart's name, else <release>-<name> (Helm's convention). The
release "featureplug" gives "featureplug", the names of the kustomize base.
*/}}
{{- define "featureplug.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "featureplug.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* helm.sh/chart: the chart's name and version. */}}
{{- define "featureplug.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The namespace of the namespaced objects. */}}
{{- define "featureplug.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The namespace of the NodeFeature objects (and of their Role). */}}
{{- define "featureplug.nodeFeatureNamespace" -}}
{{- default (include "featureplug.namespace" .) .Values.nodeFeatureNamespace -}}
{{- end -}}

{{/* The agent's service account. */}}
{{- define "featureplug.serviceAccountName" -}}
{{- default (include "featureplug.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
Selector labels: the name and the release, so that two releases' pods
never match each other's DaemonSet.
*/}}
{{- define "featureplug.selectorLabels" -}}
app.kubernetes.io/name: {{ include "featureplug.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object: Helm's standard labels and commonLabels. */}}
{{- define "featureplug.labels" -}}
helm.sh/chart: {{ include "featureplug.chart" . }}
{{ include "featureplug.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Whether the agent publishes NodeFeature objects. */}}
{{- define "featureplug.publishesNodeFeatures" -}}
{{- if eq .Values.publish "nodefeature" }}true{{ end -}}
{{- end -}}

{{/* Whether a cdi-* device list strategy is chosen. */}}
{{- define "featureplug.usesCDI" -}}
{{- range (.Values.deviceListStrategy | default list) }}{{ if hasPrefix "cdi-" . }}true{{ end }}{{ end -}}
{{- if .Values.dra.enabled }}true{{ end -}}
{{- end -}}

{{/* Whether the rules come from a mounted ConfigMap (not a builtin). */}}
{{- define "featureplug.rulesFromConfigMap" -}}
{{- if not .Values.rules.builtin }}true{{ end -}}
{{- end -}}

{{/* The ConfigMap holding rules.yaml. */}}
{{- define "featureplug.rulesConfigMap" -}}
{{- default (printf "%s-rules" (include "featureplug.fullname" .)) .Values.rules.existingConfigMap -}}
{{- end -}}

{{/*
The agent container's security context: .Values.securityContext
(unprivileged), plus exactly what the enabled options need: privileged
for a driver root (nothing else puts the GPUs' device nodes into the
container), SYS_ADMIN for MIG monitoring through the NVIDIA runtime.
Kubernetes refuses both with allowPrivilegeEscalation false, so they set
it to true.
*/}}
{{- define "featureplug.securityContext" -}}
{{- $sc := deepCopy (.Values.securityContext | default dict) -}}
{{- if .Values.driverRoot -}}
{{- $_ := set $sc "privileged" true -}}
{{- $_ := set $sc "allowPrivilegeEscalation" true -}}
{{- end -}}
{{- if .Values.migMonitorDevices -}}
{{- $caps := deepCopy (get $sc "capabilities" | default dict) -}}
{{- $_ := set $caps "add" (append (get $caps "add" | default list) "SYS_ADMIN" | uniq) -}}
{{- $_ := set $sc "capabilities" $caps -}}
{{- $_ := set $sc "allowPrivilegeEscalation" true -}}
{{- end -}}
{{- if $sc }}{{ toYaml $sc }}{{ end -}}
{{- end -}}
