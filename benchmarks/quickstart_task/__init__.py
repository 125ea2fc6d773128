"""The quickstart's task and its bank of real SmolLM2-135M outcomes (``data/smollm2_bank.npz``)."""
