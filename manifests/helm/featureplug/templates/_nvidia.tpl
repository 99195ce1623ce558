{{/*
Values of NVIDIA's device-plugin chart (nvidia-device-plugin) that admins
moving to featureplug carry over: each fails the render with the
featureplug value to use instead, rather than the schema's "additional
properties not allowed". values.schema.json admits the names so that this
message is the one Helm shows.
*/}}
{{- define "featureplug.nvidiaValues" -}}
{{- $advice := dict
  "migStrategy" "the MIG strategy is a builtin rules file: --set rules.builtin=none|single|mixed"
  "config" "featureplug reads NVIDIA's configs as its rules file: --set-file rules.content=<config file> (config.map's one config), or --set rules.existingConfigMap=<ConfigMap> with the config under the key rules.yaml (config.name); per-node configs work as they are, by the nvidia.com/device-plugin.config label"
  "failOnInitError" "featureplug never exits when NVML cannot start (it serves nothing and reports it): remove it"
  "compatWithCPUManager" "featureplug needs no privilege for the CPU manager's static policy: give containers their devices through CDI (--set deviceListStrategy={cdi-annotations}) and remove it"
  "nvidiaDriverRoot" "--set driverRoot=<the driver root on the host> (for nodes without the NVIDIA container runtime)"
  "gdrcopyEnabled" "GDRCopy is not supported: remove it"
  "gdsEnabled" "GPUDirect Storage is not supported: remove it"
  "mofedEnabled" "MOFED is not supported: remove it"
  "deviceDiscoveryStrategy" "featureplug discovers GPUs through NVML only: remove it"
  "gfd" "featureplug publishes gpu-feature-discovery's labels itself (--set publish=nodefeature or file): remove gfd"
  "nfd" "install Node Feature Discovery on its own (its chart, or the GPU Operator's): featureplug needs nfd-master and does not deploy it"
  "devicePlugin" "featureplug is the device plugin: remove devicePlugin"
  "cdi" "--set extraArgs={--cdi-hook-path=<path>} for cdi.nvidiaHookPath; CDI specs are written with a cdi-* deviceListStrategy"
  "allowDefaultNamespace" "featureplug installs into any namespace: remove it"
  "selectorLabelsOverride" "featureplug's selector labels are app.kubernetes.io/name and instance: remove it"
  "componentSelectorLabels" "featureplug runs one DaemonSet: remove it"
-}}
{{- $found := list -}}
{{- range $name := keys $advice | sortAlpha -}}
{{- if hasKey $.Values $name -}}
{{- $found = append $found (printf "%s is a value of NVIDIA's device-plugin chart, not featureplug's: %s" $name (get $advice $name)) -}}
{{- end -}}
{{- end -}}
{{- if $found -}}
{{- fail (printf "\n%s\n(docs/migration.md maps every NVIDIA value and flag)" (join "\n" $found)) -}}
{{- end -}}
{{- end -}}
