{{/*
The six components: values key -> Deployment name (= pod label app, as KAI's operator names them), the
`kai run` component, its ServiceAccount and whether it serves a webhook.
*/}}
{{- define "kai.components" -}}
admission:
  name: admission
  component: admission
  serviceAccount: admission
  webhook: true
  elects: false
binder:
  name: binder
  component: binder
  role: kai-binder
  serviceAccount: binder
  webhook: false
  elects: true
  lease: kai-binder
podgrouper:
  name: pod-grouper
  component: pod-grouper
  role: kai-podgrouper
  serviceAccount: pod-grouper
  webhook: false
  elects: true
podgroupcontroller:
  name: podgroup-controller
  component: podgroup-controller
  role: kai-podgroup-controller
  serviceAccount: podgroup-controller
  webhook: true
  elects: true
queuecontroller:
  name: queue-controller
  component: queue-controller
  role: kai-queuecontroller
  serviceAccount: queue-controller
  webhook: true
  elects: true
scheduler:
  name: kai-scheduler-default
  component: scheduler
  role: kai-scheduler
  serviceAccount: scheduler
  webhook: false
  elects: true
  lease: kai-scheduler-default
{{- end -}}

{{/*
The hardened pod spec of every component, in one place (an operator rendering the same Deployments mirrors
these three): non-root, no privilege escalation, every capability dropped, RuntimeDefault seccomp and a
read-only root filesystem, with an emptyDir for /tmp (the webhook servers' certificate directory lives there).
The values (global.podSecurityContext, global.securityContext) default to exactly this.
*/}}
{{- define "kai.podHardening" -}}
{{- with .Values.global.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "kai.containerHardening" -}}
{{- with .Values.global.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "kai.tmpVolume" -}}
- name: tmp
  emptyDir: {sizeLimit: 64Mi}
{{- end -}}

{{/*
The Lease of a leader-elected Deployment, owned by the release so that `helm uninstall` removes it (the
replicas only renew it). Arguments: (list $ leaseName appLabel).
*/}}
{{- define "kai.lease" -}}
{{- $root := index . 0 -}}
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: {{ index . 1 }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    app: {{ index . 2 }}
    {{- include "kai.labels" $root | nindent 4 }}
spec: {}
{{- end -}}

{{- define "kai.labels" -}}
app.kubernetes.io/name: kai-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The one image; arguments: (list $ componentTag), the component's own image.tag winning over global.tag. */}}
{{- define "kai.image" -}}
{{- $root := index . 0 -}}
{{- $g := $root.Values.global -}}
{{- $repo := $g.image.repository -}}
{{- if $g.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" $g.registry) $repo }}{{ end -}}
{{- printf "%s:%s" $repo ((index . 1) | default $g.tag | default $root.Chart.AppVersion) -}}
{{- end -}}

{{/* Leader election of one component: its own switch if set, else global.leaderElection or replicas > 1. */}}
{{- define "kai.leaderElect" -}}
{{- $root := index . 0 -}}{{- $key := index . 1 -}}{{- $meta := index . 2 -}}
{{- $v := index $root.Values $key -}}
{{- if not $meta.elects -}}false
{{- else if not (kindIs "invalid" $v.leaderElection) -}}{{ $v.leaderElection }}
{{- else -}}{{ or $root.Values.global.leaderElection (gt (int $v.replicaCount) 1) }}
{{- end -}}
{{- end -}}

{{/*
"true" when the object does not exist, or exists and belongs to this release (so helm keeps managing it);
an object someone else installed (e.g. `kai dev up`, or KAI itself) is left alone. `helm template` has no
cluster: lookup answers nothing and everything renders.
*/}}
{{- define "kai.ownedOrAbsent" -}}
{{- $root := index . 0 -}}
{{- $obj := lookup (index . 1) (index . 2) (index . 3) (index . 4) -}}
{{- if not $obj -}}true
{{- else -}}
{{- $ann := $obj.metadata.annotations | default dict -}}
{{- and (eq (index $ann "meta.helm.sh/release-name" | default "") $root.Release.Name) (eq (index $ann "meta.helm.sh/release-namespace" | default "") $root.Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/*
The serving certificate of one webhook Service as a dict {ca, crt, key} (base64). Reuses the Secret of a
previous install/upgrade when its subject alternative names are unchanged, so an upgrade neither rotates the
CA bundle nor restarts anything; otherwise a new self-signed CA and certificate.
Arguments: (list $ secretName serviceName).
*/}}
{{- define "kai.webhookCert" -}}
{{- $root := index . 0 -}}{{- $secretName := index . 1 -}}{{- $svc := index . 2 -}}
{{- $ns := $root.Release.Namespace -}}
{{- $c := $root.Values.global.webhookCert -}}
{{- $dns := concat (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) ($c.extraDNSNames | default list) -}}
{{- $ips := $c.ipAddresses | default list -}}
{{- $sans := sha256sum (toJson (dict "dns" $dns "ips" $ips)) | trunc 16 -}}
{{- $existing := lookup "v1" "Secret" $ns $secretName -}}
{{- $data := dict -}}
{{- if $existing -}}
{{- $ann := $existing.metadata.annotations | default dict -}}
{{- $d := $existing.data | default dict -}}
{{- if and (eq (index $ann "kai.scheduler/cert-sans" | default "") $sans) (index $d "ca.crt") (index $d "tls.crt") (index $d "tls.key") -}}
{{- $data = dict "ca" (index $d "ca.crt") "crt" (index $d "tls.crt") "key" (index $d "tls.key") -}}
{{- end -}}
{{- end -}}
{{- if not $data -}}
{{- $ca := genCA (printf "%s-ca" $svc) (int $c.validityDays) -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" $svc $ns) $ips $dns (int $c.validityDays) $ca -}}
{{- $data = dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) -}}
{{- end -}}
{{- $_ := set $data "sans" $sans -}}
{{- toYaml $data -}}
{{- end -}}

{{/* The TLS Secret of a webhook server (not with cert-manager). Arguments: (list $ secretName app certDict). */}}
{{- define "kai.webhookSecret" -}}
{{- $root := index . 0 -}}{{- $cert := index . 3 -}}
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata:
  name: {{ index . 1 }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    app: {{ index . 2 }}
    {{- include "kai.labels" $root | nindent 4 }}
  annotations:
    kai.scheduler/cert-sans: {{ $cert.sans | quote }}
data:
  ca.crt: {{ $cert.ca }}
  tls.crt: {{ $cert.crt }}
  tls.key: {{ $cert.key }}
{{- end -}}

{{/* cert-manager Issuer + Certificate of a webhook server. Arguments: (list $ secretName serviceName). */}}
{{- define "kai.certManagerCert" -}}
{{- $root := index . 0 -}}{{- $svc := index . 2 -}}{{- $ns := $root.Release.Namespace -}}
{{- $c := $root.Values.global.webhookCert -}}
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {{ $svc }}-webhook
  namespace: {{ $ns }}
  labels:
    {{- include "kai.labels" $root | nindent 4 }}
spec:
  secretName: {{ index . 1 }}
  duration: {{ printf "%dh" (mul (int $c.validityDays) 24) }}
  dnsNames:
    {{- range concat (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) ($c.extraDNSNames | default list) }}
    - {{ . }}
    {{- end }}
  {{- with $c.ipAddresses }}
  ipAddresses:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  issuerRef:
    {{- if $root.Values.global.certManager.issuerRef }}
    {{- toYaml $root.Values.global.certManager.issuerRef | nindent 4 }}
    {{- else }}
    name: kai-selfsigned
    kind: Issuer
    {{- end }}
{{- end -}}

{{/* clientConfig of a webhook: the Service, or a URL in development. Arguments: (list $ svc path url certDict). */}}
{{- define "kai.clientConfig" -}}
{{- $root := index . 0 -}}{{- $url := index . 3 -}}{{- $cert := index . 4 -}}
clientConfig:
  {{- if $url }}
  url: {{ printf "%s%s" (trimSuffix "/" $url) (index . 2) | quote }}
  {{- else }}
  service:
    name: {{ index . 1 }}
    namespace: {{ $root.Release.Namespace }}
    path: {{ index . 2 | quote }}
    port: 443
  {{- end }}
  {{- if not $root.Values.global.certManager.enabled }}
  caBundle: {{ $cert.ca }}
  {{- end }}
{{- end -}}

{{/* Annotation asking cert-manager's cainjector to fill the caBundle. Arguments: (list $ svc). */}}
{{- define "kai.caInjection" -}}
{{- if (index . 0).Values.global.certManager.enabled }}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s-webhook" (index . 0).Release.Namespace (index . 1) }}
{{- end }}
{{- end -}}

{{/* namespaceSelector of the pod webhooks: never kube-system nor the release namespace. */}}
{{- /*
The pod webhooks' selectors; `index . 1` is "mutate" or "validate". Beside KAI's scheduler-name-match, each webhook
gets a condition that lets through only the pods it can change or deny (operators/core/podwebhooks.py writes the
same expressions; the static chart/operator equivalence test holds them equal).
*/ -}}
{{- define "kai.podWebhookSelectors" -}}
{{- $which := index . 1 -}}
{{- with index . 0 -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: [kube-system, {{ .Release.Namespace }}]
    {{- if .Values.admission.queueLabelSelector }}
    - key: {{ include "kai.queueLabelKey" . }}
      operator: Exists
    {{- end }}
  {{- with .Values.global.namespaceLabelSelector }}
  matchLabels:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- with .Values.global.podLabelSelector }}
objectSelector:
  matchLabels:
    {{- toYaml . | nindent 4 }}
{{- end }}
matchConditions:
  - name: scheduler-name-match
    expression: {{ printf "object.spec.schedulerName == '%s'" .Values.global.schedulerName | quote }}
{{- $a := "object.metadata.annotations" }}
{{- $sharing := printf "has(%s) && ('gpu-fraction' in %s || 'gpu-memory' in %s)" $a $a $a }}
{{- if eq $which "validate" }}
  - name: may-be-denied
    expression: {{ printf "(has(%s) && ['gpu-fraction', 'gpu-memory', 'gpu-fraction-num-devices', 'mps', 'kai.scheduler/preemption-delay'].exists(k, k in %s)) || (has(object.metadata.labels) && 'kai.scheduler/preemption-delay' in object.metadata.labels)" $a $a | quote }}
{{- /* GPU sharing surely on (no extra argument mentions its flag): a CREATE proven valid in CEL skips the call. */}}
{{- $sharingFlag := false }}{{ range .Values.admission.extraArgs }}{{ if hasPrefix "--gpu-sharing-enabled" (toString .) }}{{ $sharingFlag = true }}{{ end }}{{ end }}
{{- if and (eq (include "kai.gpuSharing" .) "true") (not $sharingFlag) }}
  - name: not-a-proven-valid-create
    expression: {{ printf "request.operation != 'CREATE' || !(has(%[1]s) && (('gpu-fraction' in %[1]s) != ('gpu-memory' in %[1]s)) && (!('gpu-fraction' in %[1]s) || (%[1]s['gpu-fraction'].matches('^0?[.][0-9]{1,15}$') && %[1]s['gpu-fraction'].matches('[1-9]'))) && (!('gpu-memory' in %[1]s) || %[1]s['gpu-memory'].matches('^[1-9][0-9]{0,17}$')) && (!('gpu-fraction-num-devices' in %[1]s) || %[1]s['gpu-fraction-num-devices'].matches('^[1-9][0-9]{0,17}$')) && !('kai.scheduler/preemption-delay' in %[1]s) && !(has(object.metadata.labels) && 'kai.scheduler/preemption-delay' in object.metadata.labels) && has(object.spec.containers) && size(object.spec.containers) > 0 && !object.spec.containers.exists(c, has(c.resources) && has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits) && !(has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.resources) && has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits)) && (!('gpu-fraction-container-name' in %[1]s) || object.spec.containers.exists(c, c.name == %[1]s['gpu-fraction-container-name']) || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, c.name == %[1]s['gpu-fraction-container-name']))))" $a | quote }}
{{- end }}
{{- else }}
{{- $scope := include "kai.admissionMutates" . }}
{{- if eq $scope "sharing" }}
  - name: requests-gpu-sharing
    expression: {{ $sharing | quote }}
{{- else if eq $scope "gpu" }}
  - name: requests-gpu
    expression: {{ printf "(%s) || (has(object.spec.containers) && object.spec.containers.exists(c, has(c.resources) && ((has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits) || (has(c.resources.requests) && 'nvidia.com/gpu' in c.resources.requests))))" $sharing | quote }}
{{- end }}
{{- end }}
{{- end -}}
{{- end -}}

{{- /*
Which kai-scheduler pods the mutating webhook changes: "every-pod" with quota gates, "gpu" when extra arguments set
the GPU-pod runtime class, else "sharing" (GPU-sharing pods). Any mention of a widening flag counts.
*/ -}}
{{- define "kai.admissionMutates" -}}
{{- $v := .Values.admission -}}
{{- $scope := "sharing" -}}
{{- range $v.extraArgs }}{{ if hasPrefix "--gpu-pod-runtime-class-name" (toString .) }}{{ $scope = "gpu" }}{{ end }}{{ end -}}
{{- range $v.extraArgs }}{{ if hasPrefix "--quota-gates" (toString .) }}{{ $scope = "every-pod" }}{{ end }}{{ end -}}
{{- if $v.quotaGates }}{{ $scope = "every-pod" }}{{ end -}}
{{- $scope -}}
{{- end -}}

{{/* Is the component of values key `index . 1` installed (`<component>.enabled`, KAI's switch)? */}}
{{- define "kai.componentEnabled" -}}
{{- $v := index (index . 0).Values (index . 1) -}}
{{- if kindIs "invalid" $v.enabled }}true{{ else }}{{ $v.enabled }}{{ end -}}
{{- end -}}

{{/*
Effective values where KAI renamed a key: the current spelling unless only the deprecated one is given (the
deprecated keys have no default, so a value there was set by the user). "kai.deprecations" names them for NOTES.
*/}}
{{- define "kai.fractionRuntimeClass" -}}
{{- $a := .Values.admission -}}
{{- if and (hasKey $a "gpuPodRuntimeClassName") (not (hasKey $a "gpuFractionRuntimeClassName")) -}}
{{- $a.gpuPodRuntimeClassName | default "" -}}
{{- else if and (hasKey $a "gpuPodRuntimeClassName") (eq (toString $a.gpuFractionRuntimeClassName) "nvidia") -}}
{{- /* the default of the new key: the deprecated key was the one set */ -}}
{{- $a.gpuPodRuntimeClassName | default "" -}}
{{- else -}}
{{- $a.gpuFractionRuntimeClassName | default "" -}}
{{- end -}}
{{- end -}}

{{- define "kai.priorityClasses" -}}
{{- $new := .Values.defaultPriorityClasses | default dict -}}
{{- $old := .Values.priorityClasses | default dict -}}
{{- $enabled := $new.enabled -}}
{{- if hasKey $old "create" }}{{ $enabled = and $enabled $old.create }}{{ end -}}
{{- toYaml (dict "enabled" $enabled "classes" ($old.classes | default $new.classes)) -}}
{{- end -}}

{{- define "kai.reservationCreate" -}}
{{- $rr := .Values.global.resourceReservation -}}
{{- $ns := $rr.createNamespace -}}{{- $sa := $rr.createServiceAccount -}}
{{- if hasKey $rr "create" }}{{ $ns = and $ns $rr.create }}{{ $sa = and $sa $rr.create }}{{ end -}}
{{- toYaml (dict "namespace" $ns "serviceAccount" $sa) -}}
{{- end -}}

{{/* PodDisruptionBudget of a component: {enabled, minAvailable | maxUnavailable}; admission.pdb is deprecated. */}}
{{- define "kai.pdb" -}}
{{- $v := index (index . 0).Values (index . 1) -}}
{{- $pdb := deepCopy ($v.podDisruptionBudget | default dict) -}}
{{- with $v.pdb -}}
{{- if hasKey . "enabled" }}{{ $_ := set $pdb "enabled" .enabled }}{{ end -}}
{{- if hasKey . "minAvailable" }}{{ $_ := set $pdb "minAvailable" .minAvailable }}{{ $_ := unset $pdb "maxUnavailable" }}{{ end -}}
{{- end -}}
{{- toYaml $pdb -}}
{{- end -}}

{{/* Deprecated keys the user set, one "- old: use new" line each (NOTES.txt). */}}
{{- define "kai.deprecations" -}}
{{- if hasKey .Values.admission "gpuPodRuntimeClassName" }}
- admission.gpuPodRuntimeClassName: use admission.gpuFractionRuntimeClassName (same meaning, KAI v0.16+)
{{- end }}
{{- if hasKey .Values.admission "pdb" }}
- admission.pdb: use admission.podDisruptionBudget.{enabled, maxUnavailable}
{{- end }}
{{- if hasKey .Values "priorityClasses" }}
- priorityClasses: use defaultPriorityClasses.{enabled, classes}
{{- end }}
{{- if hasKey .Values.global.resourceReservation "create" }}
- global.resourceReservation.create: use global.resourceReservation.createNamespace / createServiceAccount
{{- end }}
{{- if kindIs "string" .Values.scheduler.actions }}{{ if .Values.scheduler.actions }}
- scheduler.actions as a string: use the map {<action>: {enabled, priority}}
{{- end }}{{ end }}
{{- end -}}

{{/* KAI keys accepted for values files written for KAI that have no effect here (NOTES.txt). */}}
{{- define "kai.ignored" -}}
{{- $o := $.Values.operator | default dict }}
{{- $kaiOnly := list }}
{{- range $key := list "qps" "burst" "metricsBindAddress" "probeBindAddress" }}
{{- if hasKey $o $key }}{{ $kaiOnly = append $kaiOnly $key }}{{ end }}
{{- end }}
{{- if $kaiOnly }}
- operator.{{ join ", operator." $kaiOnly }}: KAI's operator settings with no counterpart here (the kai-operator serves metrics on :8080 and probes on :8081)
{{- end }}

{{- if $o.logLevel }}
- operator.logLevel: KAI's operator log level (zap); global.logLevel sets the kai-operator's
{{- end }}
{{- range $key := list "nodescaleadjuster" "crdupgrader" "topologyMigration" "postCleanup" "prometheus" "kaiConfig" "kaiConfigDeployer" "numaPlacementExporter" }}
{{- if hasKey $.Values $key }}
- {{ $key }}: KAI's {{ $key }} has no counterpart here
{{- end }}
{{- end }}
{{- if $.Values.openshift }}
- openshift: no OpenSecurityContextConstraints are installed by this chart
{{- end }}
{{- if has (toString ($.Values.global.fipsMode | default "off")) (list "on" "only") }}
- global.fipsMode: one image (no -fips tags) runs every component
{{- end }}
{{- if has ($.Values.global.gpuSharingMode | default "") (list "HamiCore" "NvFractions") }}
- global.gpuSharingMode {{ $.Values.global.gpuSharingMode }}: GPU sharing is on, without its GPU memory enforcement
{{- end }}
{{- if ($.Values.global.nvFractions | default dict).set }}
- global.nvFractions.set: NVIDIA's gpu-sharing operator is not installed by this chart
{{- end }}
{{- if $.Values.global.blockNvidiaVisibleDevices }}
- global.blockNvidiaVisibleDevices: the admission webhook does not block NVIDIA_VISIBLE_DEVICES here
{{- end }}
{{- if ($.Values.global.vpa | default dict).enabled }}
- global.vpa: no VerticalPodAutoscalers are installed by this chart
{{- end }}
{{- if and (hasKey $.Values.podgrouper "genericKartaFallback") (not $.Values.podgrouper.genericKartaFallback) }}
- podgrouper.genericKartaFallback: this pod-grouper has no Karta fallback to turn off
{{- end }}
{{- if $.Values.binder.plugins }}
- binder.plugins: the binder's plugin chain is fixed here
{{- end }}
{{- if $.Values.scheduler.scenarioSearchBudgets }}
- scheduler.scenarioSearchBudgets: not read by this scheduler
{{- end }}
{{- if $.Values.global.clusterAutoscaling }}
- global.clusterAutoscaling: the node-scale-adjuster is not part of this project
{{- end }}
{{- range $key := list "admission" "binder" "podgrouper" "podgroupcontroller" "queuecontroller" "scheduler" }}
{{- $v := index $.Values $key }}
{{- if and $v.image $v.image.name }}
- {{ $key }}.image.name: one image ({{ include "kai.image" (list $ "") }}) runs every component
{{- end }}
{{- end }}
{{- if and .Values.binder.resourceReservationImage .Values.binder.resourceReservationImage.name }}
- binder.resourceReservationImage: use global.resourceReservation.image (a full image reference)
{{- end }}
{{- end -}}

{{/* The admission webhook Service (KAI's Config spec.admission.serviceName): the Service, every webhook's
target and the serving certificate's DNS names; the Deployment stays `admission`. */}}
{{- define "kai.admissionService" -}}
{{- .Values.admission.serviceName | default "admission" -}}
{{- end -}}

{{/* The queue label key: KAI's podgrouper.queueLabelKey when given (KAI wires it into its Config), else global. */}}
{{- define "kai.queueLabelKey" -}}
{{- .Values.podgrouper.queueLabelKey | default .Values.global.queueLabelKey -}}
{{- end -}}

{{/*
The Config spec the kai-operator renders the suite from (operator.enabled): KAI's Config shape (`global`, and per
component `service` {enabled, image, resources, affinity} and `replicas`), extended with the chart values KAI's
Config has no key for (nodeSelector, tolerations, podAnnotations, args, ports, leaderElection, ...). Every value
is resolved here (deprecated spellings, global fallbacks), so the operator renders exactly what the chart would.
*/}}
{{- define "kai.configSpec" -}}
{{- $g := .Values.global -}}
{{- $global := dict "registry" $g.registry "image" (dict "repository" $g.image.repository) "tag" ($g.tag | default .Chart.AppVersion) "imagePullPolicy" $g.imagePullPolicy "imagePullSecrets" $g.imagePullSecrets "schedulerName" $g.schedulerName "queueLabelKey" (include "kai.queueLabelKey" .) "nodePoolLabelKey" ($g.nodePoolLabelKey | default "kai.scheduler/node-pool") "leaderElection" $g.leaderElection "logLevel" $g.logLevel "jsonLog" $g.jsonLog "priorityClassName" $g.priorityClassName "requireDefaultPodAntiAffinityTerm" $g.requireDefaultPodAntiAffinityTerm "namespaceLabelSelector" $g.namespaceLabelSelector "podLabelSelector" $g.podLabelSelector "nodeSelector" $g.nodeSelector "tolerations" $g.tolerations "affinity" $g.affinity "podSecurityContext" $g.podSecurityContext "securityContext" $g.securityContext -}}
{{- $spec := dict "namespace" .Release.Namespace "global" $global -}}
{{- $keys := dict "admission" "admission" "binder" "binder" "podgrouper" "podGrouper" "podgroupcontroller" "podGroupController" "queuecontroller" "queueController" "scheduler" "scheduler" -}}
{{- range $key, $kai := $keys -}}
{{- $v := index $.Values $key -}}
{{- $image := $v.image | default dict -}}
{{- $service := dict "enabled" (eq (include "kai.componentEnabled" (list $ $key)) "true") "image" (dict "tag" ($image.tag | default "") "pullPolicy" ($image.pullPolicy | default "")) "resources" ($v.resources | default dict) "affinity" ($v.affinity | default dict) "nodeSelector" ($v.nodeSelector | default dict) "tolerations" ($v.tolerations | default list) "podAnnotations" ($v.podAnnotations | default dict) "args" ($v.extraArgs | default list) -}}
{{- $_ := set $service "podDisruptionBudget" (include "kai.pdb" (list $ $key) | fromYaml) -}}
{{- $c := dict "service" $service "replicas" (int $v.replicaCount) "ports" $v.ports -}}
{{- if hasKey $v "leaderElection" }}{{ $_ := set $c "leaderElection" $v.leaderElection }}{{ end -}}
{{- if $v.certSecretName }}{{ $_ := set $c "certSecretName" $v.certSecretName }}{{ end -}}
{{- if $v.webhook }}{{ $_ := set $c "webhook" (dict "failurePolicy" $v.webhook.failurePolicy "timeoutSeconds" $v.webhook.timeoutSeconds "url" ($v.webhook.url | default "")) }}{{ end -}}
{{- if eq $key "admission" -}}
{{- $_ := set $c "gpuSharing" (eq (include "kai.gpuSharing" $) "true") -}}
{{- $_ := set $c "gpuPodRuntimeClassName" (include "kai.fractionRuntimeClass" $) -}}
{{- $_ := set $c "queueLabelSelector" $v.queueLabelSelector -}}
{{- if $v.quotaGates }}{{ $_ := set $c "quotaGates" true }}{{ end -}}
{{- $_ := set $c "serviceName" (include "kai.admissionService" $) -}}
{{- else if eq $key "binder" -}}
{{- $rr := $g.resourceReservation -}}
{{- $_ := set $c "maxConcurrentReconciles" $v.maxConcurrentReconciles -}}
{{- $_ := set $c "cdiEnabled" $v.cdiEnabled -}}
{{- $_ := set $c "resourceReservation" (dict "namespace" $rr.namespace "serviceAccountName" $rr.serviceAccount "appLabel" $rr.appLabel "image" $rr.image "runtimeClassName" ($v.runtimeClassName | default $rr.runtimeClassName | default "") "allocationTimeout" $v.resourceReservationAllocationTimeout "podResources" ($v.resourceReservationPodResources | default dict) "fakeGpuNodes" $rr.fakeGpuNodes) -}}
{{- else if eq $key "podgrouper" -}}
{{- $_ := set $c "maxConcurrentReconciles" $v.maxConcurrentReconciles -}}
{{- else if eq $key "queuecontroller" -}}
{{- $_ := set $c "webhooks" (dict "enableValidation" $v.webhook.enabled) -}}
{{- $_ := set $c "metricsNamespace" $v.metricsNamespace -}}
{{- else if eq $key "podgroupcontroller" -}}
{{- $_ := set $c "webhooks" (dict "enableValidation" $v.webhook.enabled) -}}
{{- else if eq $key "scheduler" -}}
{{- $_ := set $c "staleGracePeriod" ($v.staleGracePeriod | default "") -}}
{{- $_ := set $c "schedulePeriod" ($v.schedulePeriod | default "") -}}
{{- end -}}
{{- $_ := set $spec $kai $c -}}
{{- end -}}
{{- toYaml $spec -}}
{{- end -}}

{{/* The operator renders the components (operator.enabled): the chart then renders none of their objects. */}}
{{- define "kai.operated" -}}
{{- if (.Values.operator | default dict).enabled }}true{{ else }}false{{ end -}}
{{- end -}}

{{/*
GPU sharing on or off: KAI v0.18's global.gpuSharingMode when set (Disabled: off; NonMemoryEnforced, HamiCore,
NvFractions: on), else the older global.gpuSharing.
*/}}
{{- define "kai.gpuSharing" -}}
{{- $mode := .Values.global.gpuSharingMode | default "" -}}
{{- if $mode }}{{ ne $mode "Disabled" }}{{ else }}{{ .Values.global.gpuSharing | default false }}{{ end -}}
{{- end -}}
