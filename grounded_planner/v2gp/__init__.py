"""V2GP: robot demonstrations to grounded-plan training data, and fine-tuning."""
