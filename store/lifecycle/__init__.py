"""The only writers of every `status` column, one module per state machine.

The states and the moves each machine allows are in store/states.py; a writer here moves a row
only from a state the table lets reach the new one, by one conditional UPDATE, so a redelivered
task or a racing answer changes nothing twice. tests/store/test_status_writers.py fails on a
status written anywhere else.
"""
