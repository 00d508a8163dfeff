# The tailhouse image: the API (`serve`) and, from the ingest issue on, the standalone worker.
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY bin ./bin
COPY src ./src
COPY sql ./sql
COPY tsconfig.json ./
ENV NODE_ENV=production DATA_DIR=/data
VOLUME /data
EXPOSE 3000
ENTRYPOINT ["node", "bin/tailhouse.js"]
CMD ["serve"]
