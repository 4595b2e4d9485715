"""Looking at what episodes did: trajectory files read into one record, replayed for the state diff against the
task's target (`explain`), and shown as a terminal transcript (`terminal`) or one self-contained HTML page (`html`)."""
