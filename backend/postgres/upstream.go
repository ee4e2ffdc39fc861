package postgres

// UpstreamMigration is one migration file of FlowFabric's
// ff-backend-postgres as sqlx records it in the ledger.
type UpstreamMigration struct {
	// Version is the file's numeric prefix.
	Version int64
	// File is the file name, e.g. "0001_initial.sql"; sqlx's ledger
	// description is derived from it (see LedgerDescription).
	File string
	// Checksum is the hex SHA-384 of the file's bytes (LF line endings),
	// the checksum sqlx records and verifies.
	Checksum string
}

// UpstreamMigrations lists FlowFabric's migration files at v0.15 (commit
// 0def5967) with their sqlx checksums. fabric records these checksums,
// not its own files', in the _sqlx_migrations ledger: FlowFabric's sqlx
// refuses a database whose recorded checksum differs from its embedded
// file ("previously applied but has been modified"), and fabric's files
// create the same schema from different text.
//
// # Notes
//
//   - The checksums are facts computed over the upstream files' bytes;
//     the files themselves are not part of fabric.
//   - A FlowFabric build from a checkout with CRLF line endings embeds
//     other bytes and records other checksums; fabric reports those
//     rows as foreign and leaves them alone.
var UpstreamMigrations = []UpstreamMigration{
	{1, "0001_initial.sql", "9ff7e96a98ffd0cfa2f3eb32e0f9482ad1905dc78cdc52bdb87e3d68794771a7f2e06a8294449ddd1b7f516beddf1b40"},
	{2, "0002_budget.sql", "a81355439c91e16dd62e6f29169507b76db85605f688b815e3134d1956171b97b9581794f8af0f0fdb6780d3b2eb3ebd"},
	{3, "0003_dispatch_outbox.sql", "9efca66d6be816411a9413c3aae787c5a154059c63866c1c03d6ceb2389b85b34328314258eb8c715c6ed9c91b5e4fa7"},
	{4, "0004_suspend_signal.sql", "53be2f02f84d9de6969732cfe8fa3c50dc3d828ef50d0165bf88327594f27ec652f2c60cc97bd81212f93484751d03f9"},
	{5, "0005_timeout_scanners.sql", "964a72a0747971ebd580dd4b6bcf1999a972f59a14cc78d0ef47f7e4782829c0b3db5da94e803f086ccefab6b550c040"},
	{6, "0006_lease_event_outbox.sql", "cc165744de11e412fe744823c98a9d18b5f697d6f64a95abc5971f060fa1a99bfdac126ddd9aff64534b04c3c9974490"},
	{7, "0007_signal_event_outbox.sql", "c2f317da61d8b95b32f77857dc9524e8512bf8ed6051a03102dffc72b264a85b2df162d2e0235b34e0413f758f47a920"},
	{8, "0008_lease_event_instance_tag.sql", "7238cd72a0fb711dc1ed014988955bcc5e87ca79979c42cfc33dac989eefcbc65d2f49099f942f4b67e02a870004cc19"},
	{9, "0009_signal_event_instance_tag.sql", "011f4e616d5d1b52cfe78bfca35efc1464ca385d41443dc8195138aaadb751eb261aff29886fa1c370967164d2a34dcc"},
	{10, "0010_operator_event_outbox.sql", "4f13556be64c5b25ab533738226309624da50d06f877af407b111b6d7021405abd340c8f54d5e34af33a0b54fdc5e82e"},
	{11, "0011_waitpoint_pending_extensions.sql", "dcc06ee568795ad9d3f359457f9f0c4da9f4930f011a8e28285b4f20b70b927dd46b3eb798869d7ede96ff6a8809ab7c"},
	{12, "0012_quota_policy.sql", "bc113a49b73b0bb5b1bfc64078fe8542058e73b8ad76e45f16936354f3d12460d83aca4518511354e6e0829dcd14ce56"},
	{13, "0013_budget_policy_extensions.sql", "7c843e7d483dccecdcf783272e426bd3a0b8225d38d9a2384cd60e8f7e4ffb1fe36ceff0eb4a7dc1744bf89c1050df36"},
	{14, "0014_cancel_backlog.sql", "d6c600cb1d2faf649bc2caa564169ebe73156797ab139a80ef2b9d3d720f21b929aef7832ad490d0dd979881eec3605b"},
	{16, "0016_started_at_ms.sql", "2a69a24097418ea8e0d8296bb2a0e4f37c95bbd7df6f41d1eb3c61afcd0a0078e56af5bd1a6f9e4647c1831a9a9c15ab"},
	{17, "0017_claim_grant_table.sql", "bcab01e7a73e8a199aad73ce595ddb963b136ad430deded8767c08d4e7f117425ef99f7dd50545d33039b3f2d71e74c0"},
	{18, "0018_completion_event_lookup_idx.sql", "c17a55ee5015dc59780b61118473367552f98f2f637af3365b0cf57d0cb211878a018ffae120704de86ac8a3760e1989"},
	{19, "0019_flow_summary.sql", "c7558a668b756efec6453e66f1f9e28be58d01928a58963841a8d9773c3b65ccafc820402bdf4dc9628f0891c6a301f6"},
	{20, "0020_budget_usage_by_exec.sql", "818839cadb8c9fee615964951b6a788dbd8cfb44d4e6a6f6cb11ddcb471612e5dc45f7403f8d9146a8e3d067df316b7e"},
	{21, "0021_worker_registry.sql", "8ef0d6feb183a6bd15ebc6f1dfa3d9a47004a84544daf56f675e28ef9ee365025d8e24333a77c82eb80255805a91b825"},
	{22, "0022_worker_registry_event_pk.sql", "fe57077fab6ff1cc0a114b47b57383b021273829376947e2028c20f29a10343d47340a809d042ef044e711d241b59005"},
}
