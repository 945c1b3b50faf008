"""Operations around a run: the job gate, the nightly sweep, the history database and its trends,
the Nagios plugin, and the lock that keeps two runs from writing one history at once."""
