package agent

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/rules/plan"
)

// planReportValue reads a counter's or gauge's value.
func planReportValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Gauge != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}

// planReportRules parses a rules file body for the plan report tests.
func planReportRules(t *testing.T, body string) agentconfig.RuleSet {
	t.Helper()
	rs, err := testRulesEngine().Parse("r.yaml", []byte("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n"+body))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestPlanReport checks how plans that leave devices out are taken and
// reported. A rule's template that fails on some devices refuses the
// rules whole, as `rules check` on the node does, with check's message;
// devices left out for what the node is (a problem that is not a
// template's) make a "partial" reload, one WARN per change and the gauge;
// rules that leave out every device they claim are refused as invalid.
func TestPlanReport(t *testing.T) {
	src, err := gpusource.OpenFake("a100-80gb-mixed")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var logs bytes.Buffer
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: src, Plugin: deviceplugin.Options{KubeletDir: t.TempDir()},
		RulesEngine: testRulesEngine(),
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	inv, _, err := src.Discover()
	if err != nil {
		t.Fatal(err)
	}
	a.setInventory(inv)

	good := planReportRules(t, "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n")
	if !a.takeRules(good) || planReportValue(t, a.metrics.ruleReloads.WithLabelValues("applied")) != 1 {
		t.Fatal("valid rules were not applied")
	}
	mig := planReportRules(t, "- name: mig\n  devices: mig\n  resource: 'nvidia.com/mig-{{ .profile }}'\n- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n")
	if a.takeRules(mig) || a.ruleSet != good {
		t.Fatal("rules whose template names one device invalidly replaced the last good")
	}
	if got := planReportValue(t, a.metrics.ruleReloads.WithLabelValues("invalid")); got != 1 {
		t.Errorf(`rule_reloads_total{result="invalid"} = %v, want 1`, got)
	}
	for _, want := range []string{"rules rejected", `r.yaml:6: rules[0] \"mig\": resource: template gives \"nvidia.com/mig-1g.10gb+me\" for GPU 0 MIG 3 (1g.10gb+me)`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the refusal does not say %s:\n%s", want, logs.String())
		}
	}

	// A device left out for what the node is: the rest serves.
	p, err := good.Plan(a.inv, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Problems = []plan.Problem{{Device: "GPU-x", Description: "VFIO NVIDIA L40S", Rule: "vms", Message: "IOMMU group 35 cannot be passed through"}}
	partial := fixedRuleSet{p}
	if !a.takeRules(partial) || a.ruleSet != agentconfig.RuleSet(partial) {
		t.Fatal("rules that leave out a device the node cannot pass through were not taken")
	}
	if got := planReportValue(t, a.metrics.ruleReloads.WithLabelValues(reloadPartial)); got != 1 {
		t.Errorf(`rule_reloads_total{result="partial"} = %v, want 1`, got)
	}
	a.reportPlanProblems(p)
	a.reportPlanProblems(p) // unchanged: not reported again
	if n := strings.Count(logs.String(), "devices left out of the plan"); n != 1 {
		t.Errorf("%d WARN lines for one change, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "IOMMU group 35") {
		t.Errorf("the WARN line does not name the device:\n%s", logs.String())
	}
	if got := planReportValue(t, a.planReport.gauge); got != 1 {
		t.Errorf("featureplug_plan_device_errors = %v, want 1", got)
	}

	allBad := planReportRules(t, "- name: bad\n  devices: mig\n  resource: 'nvidia.com/mig {{ .profile }}'\n")
	if a.takeRules(allBad) || a.ruleSet != agentconfig.RuleSet(partial) {
		t.Error("rules that leave out every device they claim replaced the last good")
	}
	if got := planReportValue(t, a.metrics.ruleReloads.WithLabelValues("invalid")); got != 2 {
		t.Errorf(`rule_reloads_total{result="invalid"} = %v, want 2`, got)
	}
	if got := planReportValue(t, a.metrics.ruleReloads.WithLabelValues("applied")); got != 1 {
		t.Errorf(`rule_reloads_total{result="applied"} = %v, want still 1`, got)
	}

	p, err = good.Plan(a.inv, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.reportPlanProblems(p)
	if got := planReportValue(t, a.planReport.gauge); got != 0 {
		t.Errorf("featureplug_plan_device_errors = %v after the problems cleared, want 0", got)
	}
	if !strings.Contains(logs.String(), "every device the rules claim is served again") {
		t.Errorf("no line says the problems cleared:\n%s", logs.String())
	}
}

// fixedRuleSet is a RuleSet that makes one plan.
type fixedRuleSet struct{ p *plan.Plan }

func (f fixedRuleSet) Source() string     { return "fixed.yaml" }
func (f fixedRuleSet) Digest() string     { return "fixed" }
func (f fixedRuleSet) Warnings() []string { return nil }
func (f fixedRuleSet) Plan(*discovery.Inventory, map[string]string) (*plan.Plan, error) {
	return f.p, nil
}

// TestReloadThatDrainsTheNodeIsRefused: rules that would take every
// resource the last good plan serves away, without saying so, are refused
// (log, Warning Event, featureplug_rule_reloads_total{result="refused"})
// and the last good rules stay; rules that say the node serves nothing
// are taken.
func TestReloadThatDrainsTheNodeIsRefused(t *testing.T) {
	src, inv := openFakeInventory(t, "dgx-h100")
	var logs bytes.Buffer
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: src, Plugin: deviceplugin.Options{KubeletDir: t.TempDir()},
		RulesEngine: testRulesEngine(), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	a.setInventory(inv)
	good := planReportRules(t, "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n")
	if !a.takeRules(good) {
		t.Fatal("valid rules were not taken")
	}
	if a.plan, err = a.planFor(good); err != nil || len(a.plan.Resources) != 1 {
		t.Fatalf("the good plan: %v, %v", a.plan, err)
	}
	none := planReportRules(t, "- name: none\n  devices: gpu\n  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: In, value: [\"no such GPU\"]}}}]\n  resource: example.com/none\n")
	if a.takeRules(none) || a.ruleSet != good {
		t.Fatal("rules that serve nothing replaced rules that serve every GPU")
	}
	if got := planReportValue(t, a.metrics.ruleReloads.WithLabelValues(reloadRefused)); got != 1 {
		t.Errorf(`rule_reloads_total{result="refused"} = %v, want 1`, got)
	}
	if !strings.Contains(logs.String(), "would serve no resource on this node") {
		t.Errorf("no line says why the rules were refused:\n%s", logs.String())
	}
	meant := fixedRuleSet{&plan.Plan{ServeNothing: true}}
	if !a.takeRules(meant) || a.ruleSet != agentconfig.RuleSet(meant) {
		t.Error("rules that say the node serves nothing were refused")
	}
}
