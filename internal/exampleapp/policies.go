package exampleapp

// PolicyNames returns the names of every policy of the service New
// builds, for metrics that are told their policies up front
// (prommetrics.WithPolicies), so that each is reported at 0 before its
// first decision. TestPolicyNames holds it to what the routes report.
func PolicyNames() []string {
	return []string{
		"user_id_probe", "user_id_probe_net",
		"signup_ip_ceiling", "signup_net_ceiling", "nickname", "signup_ip",
		"reward_ip", "reward_net", "reward_account",
	}
}
