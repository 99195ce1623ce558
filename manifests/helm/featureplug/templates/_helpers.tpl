{{/* The name of every object; "featureplug" unless overridden. */}}
{{- define "featureplug.fullname" -}}
{{- default "featureplug" .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The namespace of the namespaced objects. */}}
{{- define "featureplug.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* The namespace of the NodeFeature objects (and of their Role). */}}
{{- define "featureplug.nodeFeatureNamespace" -}}
{{- default (include "featureplug.namespace" .) .Values.nodeFeatureNamespace -}}
{{- end -}}

{{/* The agent's service account. */}}
{{- define "featureplug.serviceAccountName" -}}
{{- default (include "featureplug.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Labels of every object. The selector uses only app.kubernetes.io/name. */}}
{{- define "featureplug.labels" -}}
app.kubernetes.io/name: featureplug
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
{{- end -}}

{{/* Whether the rules come from a mounted ConfigMap (not a builtin). */}}
{{- define "featureplug.rulesFromConfigMap" -}}
{{- if not .Values.rules.builtin }}true{{ end -}}
{{- end -}}

{{/* The ConfigMap holding rules.yaml. */}}
{{- define "featureplug.rulesConfigMap" -}}
{{- default (printf "%s-rules" (include "featureplug.fullname" .)) .Values.rules.existingConfigMap -}}
{{- end -}}
