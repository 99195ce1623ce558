package rules

// UsesNodeLabels reports whether the plan depends on the node's labels,
// that is whether any rule has a node selector. When none does, the agent
// makes and registers its first plan without waiting for its Node object
// to be listed (register first: the kubelet needs only the devices).
func (rs *RuleSet) UsesNodeLabels() bool {
	for _, r := range rs.rules {
		if r.selector != nil {
			return true
		}
	}
	return false
}
