package render

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/environment"
)

const nodeNameExtra = "authentication.kubernetes.io/node-name"

var (
	nodeFeatureGVK = schema.GroupVersionKind{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Kind: "NodeFeature"}
	nodeFeatureGVR = schema.GroupVersionResource{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Resource: "nodefeatures"}
)

// compilePolicy compiles a ValidatingAdmissionPolicy the way kube-apiserver's
// ValidatingAdmissionPolicy plugin does (same CEL environment, request type,
// variable composition and cost limits), and returns every compilation
// error instead of deferring them to evaluation.
func compilePolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) (validating.Validator, error) {
	withAuthz := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	withoutAuthz := plugincel.OptionalVariableDeclarations{}
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, v := range p.Spec.Variables {
		if r := c.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, withAuthz, environment.StoredExpressions); r.Error != nil {
			errs = append(errs, fmt.Errorf("spec.variables[%s]: %w", v.Name, r.Error))
		}
	}
	compile := func(field string, accessors []plugincel.ExpressionAccessor, opts plugincel.OptionalVariableDeclarations) plugincel.ConditionEvaluator {
		ev := c.CompileCondition(accessors, opts, environment.StoredExpressions)
		for _, e := range ev.CompilationErrors() {
			errs = append(errs, fmt.Errorf("%s: %w", field, e))
		}
		return ev
	}
	var conds []plugincel.ExpressionAccessor
	for i := range p.Spec.MatchConditions {
		conds = append(conds, (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i]))
	}
	matcher := matchconditions.NewMatcher(compile("spec.matchConditions", conds, withAuthz),
		p.Spec.FailurePolicy, "policy", "validate", p.Name)
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	validator := validating.NewValidator(
		compile("spec.validations", validations, withAuthz),
		matcher,
		compile("spec.auditAnnotations", nil, withAuthz),
		compile("spec.validations[*].messageExpression", messages, withoutAuthz),
		p.Spec.FailurePolicy, nil)
	return validator, errors.Join(errs...)
}

// nodeFeature returns a NodeFeature object; node "" leaves out the node label.
func nodeFeature(objName, node string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(nodeFeatureGVK)
	u.SetNamespace(namespace)
	u.SetName(objName)
	if node != "" {
		u.SetLabels(map[string]string{"nfd.node.kubernetes.io/node-name": node})
	}
	return u
}

// agentOn is the agent's service account with a token bound to a pod on node.
func agentOn(node string) user.Info {
	return &user.DefaultInfo{
		Name:   "system:serviceaccount:" + namespace + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/pod-name": {"featureplug-x7k2p"},
			nodeNameExtra:                           {node},
		},
	}
}

// rbacStandIn answers the policy's authorizer checks as the shipped RBAC
// does: the agent's service account holds the marker right in its
// namespace (its Role), system:masters hold every right, nobody else any.
// test/e2e/secure_admission_test.go checks the same against kube-apiserver.
var rbacStandIn = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
		return authorizer.DecisionAllow, "", nil
	}
	if u.GetName() == "system:serviceaccount:"+namespace+":"+name && a.GetNamespace() == namespace &&
		a.GetAPIGroup() == "featureplug.io" && a.GetResource() == "agents" && a.GetVerb() == "publish-own-nodefeature" {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
})

// TestAdmissionPolicy evaluates the shipped ValidatingAdmissionPolicy with
// kube-apiserver's own admission CEL machinery: each node's agent may
// create and update only its own node's NodeFeature; everyone else is not
// affected.
func TestAdmissionPolicy(t *testing.T) {
	objs := kustomize(t, "overlays/nodefeature")
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(
		find(t, objs, "ValidatingAdmissionPolicy", policyName).Object, &policy, true); err != nil {
		t.Fatal(err)
	}
	validator, err := compilePolicy(&policy)
	if err != nil {
		t.Fatalf("policy %s does not compile: %v", policyName, err)
	}

	noNode := &user.DefaultInfo{Name: "system:serviceaccount:" + namespace + ":" + name,
		Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"featureplug-x7k2p"}}}
	emptyNode := &user.DefaultInfo{Name: "system:serviceaccount:" + namespace + ":" + name,
		Extra: map[string][]string{nodeNameExtra: {}}}

	for _, tc := range []struct {
		name      string
		user      user.Info
		op        admission.Operation
		obj, old  *unstructured.Unstructured
		wantDeny  []string // substrings of the denial messages; nil: admitted
		wantMatch bool
	}{
		{name: "own NodeFeature created", user: agentOn("n1"), op: admission.Create,
			obj: nodeFeature("featureplug-n1", "n1"), wantMatch: true},
		{name: "own NodeFeature updated", user: agentOn("n1"), op: admission.Update,
			obj: nodeFeature("featureplug-n1", "n1"), old: nodeFeature("featureplug-n1", "n1"), wantMatch: true},
		{name: "other node's NodeFeature created", user: agentOn("n1"), op: admission.Create,
			obj: nodeFeature("featureplug-n2", "n2"), wantMatch: true,
			wantDeny: []string{`the agent on node n1 may write only its own NodeFeature, but featureplug-n2 has nfd.node.kubernetes.io/node-name="n2"`}},
		{name: "other node's NodeFeature updated", user: agentOn("n1"), op: admission.Update,
			obj: nodeFeature("featureplug-n2", "n2"), old: nodeFeature("featureplug-n2", "n2"), wantMatch: true,
			wantDeny: []string{`may write only its own NodeFeature`, `may not update featureplug-n2, the NodeFeature of node "n2"`}},
		{name: "other node's NodeFeature relabelled to own node", user: agentOn("n1"), op: admission.Update,
			obj: nodeFeature("featureplug-n2", "n1"), old: nodeFeature("featureplug-n2", "n2"), wantMatch: true,
			wantDeny: []string{`may not update featureplug-n2, the NodeFeature of node "n2"`}},
		{name: "own NodeFeature relabelled to other node", user: agentOn("n1"), op: admission.Update,
			obj: nodeFeature("featureplug-n1", "n2"), old: nodeFeature("featureplug-n1", "n1"), wantMatch: true,
			wantDeny: []string{`has nfd.node.kubernetes.io/node-name="n2"`}},
		{name: "NodeFeature without node label", user: agentOn("n1"), op: admission.Create,
			obj: nodeFeature("featureplug-n1", ""), wantMatch: true,
			wantDeny: []string{`has nfd.node.kubernetes.io/node-name=""`}},
		{name: "token without node name", user: noNode, op: admission.Create,
			obj: nodeFeature("featureplug-n1", "n1"), wantMatch: true,
			wantDeny: []string{"the agent's token names no node"}},
		{name: "token with an empty node name list", user: emptyNode, op: admission.Create,
			obj: nodeFeature("featureplug-n1", "n1"), wantMatch: true,
			wantDeny: []string{"the agent's token names no node"}},
		{name: "another service account is not checked", op: admission.Create,
			user: &user.DefaultInfo{Name: "system:serviceaccount:node-feature-discovery:nfd-worker",
				Extra: map[string][]string{nodeNameExtra: {"n1"}}},
			obj: nodeFeature("nfd-worker-n2", "n2")},
		{name: "the same name in another namespace is not checked", op: admission.Create,
			user: &user.DefaultInfo{Name: "system:serviceaccount:other:" + name}, obj: nodeFeature("featureplug-n2", "n2")},
		{name: "an admin is not checked", op: admission.Update,
			user: &user.DefaultInfo{Name: "kubernetes-admin", Groups: []string{"system:masters"}},
			obj:  nodeFeature("featureplug-n2", "n2"), old: nodeFeature("featureplug-n2", "n3")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obj, old runtime.Object = tc.obj, nil
			if tc.old != nil {
				old = tc.old
			}
			attrs := admission.NewAttributesRecord(obj, old, nodeFeatureGVK, namespace, tc.obj.GetName(),
				nodeFeatureGVR, "", tc.op, nil, false, tc.user)
			va := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: nodeFeatureGVK,
				VersionedObject: admission.NewLazyObject(obj)}
			if old != nil {
				va.VersionedOldObject = admission.NewLazyObject(old)
			}
			res := validator.Validate(context.Background(), nodeFeatureGVR, va, nil, nil, celconfig.RuntimeCELCostBudget, rbacStandIn)

			if matched := len(res.Decisions) > 0; matched != tc.wantMatch {
				t.Fatalf("policy applied: %v, want %v (decisions %+v)", matched, tc.wantMatch, res.Decisions)
			}
			var denials []string
			for _, d := range res.Decisions {
				if d.Evaluation == validating.EvalError {
					t.Errorf("evaluation error: %s", d.Message)
				}
				if d.Action == validating.ActionDeny {
					denials = append(denials, d.Message)
				}
			}
			if len(denials) != len(tc.wantDeny) {
				t.Fatalf("denials %q, want %d matching %q", denials, len(tc.wantDeny), tc.wantDeny)
			}
			for i, want := range tc.wantDeny {
				if !strings.Contains(denials[i], want) {
					t.Errorf("denial %d: %q, want it to contain %q", i, denials[i], want)
				}
			}
		})
	}
}

// TestAdmissionPolicyCompileErrorsAreReported guards compilePolicy itself:
// a broken expression must fail the test above, not pass silently.
func TestAdmissionPolicyCompileErrorsAreReported(t *testing.T) {
	for _, broken := range []func(p *admissionregistrationv1.ValidatingAdmissionPolicy){
		func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Variables[0].Expression = "request.userInfo.extr"
		},
		func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "variables.requestNode +"
		},
		func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConditions[0].Expression = "authorizer.group('featureplug.io').check(1)"
		},
	} {
		objs := kustomize(t, "overlays/nodefeature")
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(
			find(t, objs, "ValidatingAdmissionPolicy", policyName).Object, &p); err != nil {
			t.Fatal(err)
		}
		broken(&p)
		if _, err := compilePolicy(&p); err == nil {
			t.Errorf("a broken policy compiled without error")
		}
	}
}
