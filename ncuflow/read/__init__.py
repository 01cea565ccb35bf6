"""Reading reports: ncu_report to Launch rows, the canonical fields and their alias chains."""
