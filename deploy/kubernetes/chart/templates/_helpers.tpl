{{/* The prefix of every name: the release name, or <release>-sluice. */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of one component's pods, and its selector: (dict "root" $ "component" "gateway"). */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels of every object: its selector labels and who made it. */}}
{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* The sluice image, by digest when one is given. Unquoted: deploy/container/policy.py reads it. */}}
{{- define "sluice.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "sluice.secretName" -}}
{{- .Values.secret.name | default (include "sluice.fullname" .) -}}
{{- end -}}

{{/*
The most the gateway itself takes to stop after SIGTERM, in seconds: DRAIN_TIMEOUT (15 s, its
connections) plus COMMIT_FLUSH_TIMEOUT (10 s, the group committers) of
gateway/src/http/server.rs. deploy/kubernetes/policy.py reads both constants from that file, so
this figure cannot fall behind them unnoticed.
*/}}
{{- define "sluice.gatewayDrainSeconds" -}}25{{- end -}}

{{/* The pod security context every pod of the chart runs with. */}}
{{- define "sluice.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
# Mounted certificate files belong to this group (their mode is 0440).
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "sluice.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* envFrom of every sluice container: the Secret with the datastore URLs and ticket keys. */}}
{{- define "sluice.envFrom" -}}
- secretRef:
    name: {{ include "sluice.secretName" . }}
{{- end -}}

{{/* The TLS Secrets as volumes (read by the pod's group only), for every sluice pod. */}}
{{- define "sluice.tlsVolumes" -}}
{{- range $store := list "postgres" "redis" }}
{{- $tls := index $.Values.tls $store }}
{{- if $tls.enabled }}
- name: tls-{{ $store }}
  secret:
    secretName: {{ required (printf "tls.%s.secretName: the Secret holding the %s certificate files" $store $store) $tls.secretName }}
    defaultMode: 0440
    items:
      - key: {{ $tls.caKey }}
        path: ca.crt
      {{- if $tls.clientCertificate }}
      - key: {{ $tls.certKey }}
        path: tls.crt
      - key: {{ $tls.keyKey }}
        path: tls.key
      {{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "sluice.tlsVolumeMounts" -}}
{{- range $store := list "postgres" "redis" }}
{{- if (index $.Values.tls $store).enabled }}
- name: tls-{{ $store }}
  mountPath: /etc/sluice/tls/{{ $store }}
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{- define "sluice.hasTls" -}}
{{- if or .Values.tls.postgres.enabled .Values.tls.redis.enabled }}true{{ end -}}
{{- end -}}

{{/* Pod-level scheduling shared by every pod: image pull secrets, node selector, tolerations. */}}
{{- define "sluice.podScheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Zone and node spread of one component's pods: (dict "root" $ "component" "gateway"). */}}
{{- define "sluice.topologySpread" -}}
{{- $spread := .root.Values.topologySpread }}
{{- if or $spread.zone.enabled $spread.hostname.enabled }}
topologySpreadConstraints:
  {{- range $key, $topologyKey := dict "zone" "topology.kubernetes.io/zone" "hostname" "kubernetes.io/hostname" }}
  {{- if (index $spread $key).enabled }}
  - maxSkew: 1
    topologyKey: {{ $topologyKey }}
    whenUnsatisfiable: {{ (index $spread $key).whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "sluice.selectorLabels" $ | nindent 8 }}
    # Spread each rollout's new pods too, not only the whole set (old and new counted apart).
    matchLabelKeys: ["pod-template-hash"]
  {{- end }}
  {{- end }}
{{- end }}
{{- end -}}
