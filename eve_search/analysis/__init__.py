"""Pure functions over results: ranking agreement (Kendall tau-b, bootstrap), audit measures,
summary statistics. Shared by the experiments and the dashboard; trains nothing."""
